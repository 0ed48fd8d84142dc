"""Recurrence, periodic-tail and degeneration detectors on synthetic and real text."""

from __future__ import annotations

import pytest
from detector_helpers import feed_text, load

from detectors import DetectorConfig
from detectors.replay import split_stream

PARAS = [
    "Fill the 12-liter jug and pour it into the 6-liter jug until that one is full. ",
    "Now the 12-liter jug holds 6 liters, so empty the small jug and pour again. ",
    "That leaves nothing in the big jug, which means we are back where we started. ",
    "Maybe the trick is to measure the difference between the two jugs somehow. ",
]


def _shifting_loop(rounds: int) -> str:
    """Paragraphs recurring in a shifting order: A B A C B A D C ..."""
    order = [0, 1, 0, 2, 1, 0, 3, 2, 1, 3, 0, 2]
    return "".join(PARAS[order[i % len(order)]] for i in range(rounds))


def test_recurrence_catches_shifting_order_paragraphs() -> None:
    """Verbatim paragraphs in a shifting order fire the recurrence detector."""
    text = "Let me think about the jugs problem step by step first. " * 1 + _shifting_loop(80)
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert verdict.at_char < 3000


def test_recurrence_ignores_one_restatement() -> None:
    """Restating a step once (a re-check, here ~700 characters) is not a loop."""
    words = [f"step{i} gives value {i * 7 % 13} then we add {i} more" for i in range(20)]
    passage = ", ".join(words) + ".\n"
    fresh = [f"item{i} costs {i * 11 % 17} so the total is {i * 3} now" for i in range(300)]
    text = passage + "Let me double-check that:\n" + passage + ", ".join(fresh) + ".\n"
    assert len(passage) > 600
    assert feed_text(text) is None


def _healthy_reasoning(index: int) -> str:
    text = str(load("healthy")[index]["text"])
    start, end, _ = split_stream(text)
    return text[start:end]


@pytest.mark.parametrize(("size", "due"), [(400, 1000), (700, 1400)])
def test_a_paragraph_loop_fires_at_its_second_or_third_copy(size: int, due: int) -> None:
    """A real paragraph of 700 characters written again and again after real reasoning is
    cut at the first block after its second copy; one of 400 characters once 600
    characters are copies, halfway through its third: periodic's copy rule, before
    recurrence."""
    head = _healthy_reasoning(14)[:6000] + "\n\n"
    unit = _healthy_reasoning(15)[3000 : 3000 + size]
    verdict = feed_text(head + unit * 12)
    assert verdict is not None
    assert verdict.detector == "periodic"
    assert verdict.evidence.period == size
    assert due <= verdict.at_char - len(head) < due + 256
    later = feed_text(head + unit * 12, config=DetectorConfig(periodic_copy_chars=0))
    assert later is not None
    assert later.at_char > verdict.at_char


def test_short_loops_that_recovered_fire_the_copy_rule() -> None:
    """The traces rule V moved out of the healthy set (a unit of 258-533 characters written
    2.7-4.1 times in a row, then the thinking goes on) draw periodic's copy rule; the one
    whose loop copied 535 characters of a 113-character unit stays under 600."""
    moved = [r for r in load("ambiguous") if r.get("label_method") == "rule V (auto)"]
    assert len(moved) == 4
    fired = {}
    for record in moved:
        start, end, _ = split_stream(record["text"])
        verdict = feed_text(record["text"][start:end])
        fired[record["source"].rsplit("/", 1)[-1]] = None if verdict is None else (
            verdict.detector, verdict.evidence.period)
    assert fired == {
        "Qwen__Qwen3-0.6B.json#17": ("periodic", 258),
        "Qwen__Qwen3-0.6B.json#26": ("periodic", 268),
        "AXCXEPT__Qwen3-EZO-8B-beta.json#0": ("periodic", 533),
        "072-qwen3-30b-a3b-v2-sft-trl-megablocks.json#44": None,
    }


def test_arithmetic_progress_is_not_a_loop() -> None:
    """Step-by-step arithmetic with changing numbers keeps adding new content."""
    lines = [f"Year {y}: balance {1000 + 37 * y} plus interest {y * 3} gives {1037 + 40 * y}.\n"
             for y in range(1, 400)]
    assert feed_text("".join(lines)) is None


def test_numbered_restarts_fire() -> None:
    """A counter that keeps going ("787. Fill ...") does not hide a loop."""
    steps = ["Fill 6L jug: (6, 6)", "Pour into 12L jug: (12, 0)", "Empty 12L jug: (0, 0)"]
    text = "".join(f"{n}. {steps[n % 3]}\n" for n in range(1, 400))
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector in {"recurrence", "periodic"}


def test_digit_run_fires_periodic() -> None:
    """A run of one digit is a period-1 loop."""
    verdict = feed_text("The value is 0." + "9" * 2000)
    assert verdict is not None
    assert (verdict.detector, verdict.evidence.period) == ("periodic", 1)


def test_punctuation_run_fires() -> None:
    """'.\\n\\n' forever is caught."""
    verdict = feed_text("So the answer is" + ".\n\n" * 600)
    assert verdict is not None


def test_word_salad_fires() -> None:
    """Hundreds of words without punctuation are word salad."""
    vocab = [
        "renewal", "rebirth", "cycles", "continuity", "patterns",
        "rhythms", "dynamics", "equilibrium", "chaos",
    ]  # fmt: skip
    salad = " ".join(f"{vocab[i % len(vocab)]}{i}" for i in range(800))
    verdict = feed_text("Okay, let me think. " + salad)
    assert verdict is not None
    assert verdict.detector == "degeneration"


def test_chinese_salad_fires() -> None:
    """A long run of CJK characters with no 、 or 。 is word salad too."""
    words = (
        "教学动画喜剧爱情剧情科幻恐怖动作冒险西部战争"
        "历史传纪纪录大片贺岁档期上映首映票房观影观众影迷粉丝"
    )
    text = "好的\uff0c我来想一想。" + "".join(words[(i * 7) % len(words)] for i in range(1500))
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector == "degeneration"


def test_emoji_run_fires() -> None:
    """A long chain of different symbols with no word is degeneration."""
    symbols = "👇↓⬇🔻🔽🔼🔺▲△▴▵▸◂◃◄◅▻▶⊳⊲⊴⊵⊶⊷"
    verdict = feed_text("公式如下所示" + symbols * 20)
    assert verdict is not None
    assert verdict.detector == "degeneration"


def test_markdown_rules_are_not_symbol_runs() -> None:
    """Table rules and separators draw one symbol many times; that is not a run."""
    rule = "|" + "-" * 120 + "|" + "-" * 120 + "|\n"
    tables = [
        f"| n | n squared |\n{rule}| {n} | {n * n} |\n| {n + 1} | {(n + 1) ** 2} |\n"
        + "=" * 100 + "\n"
        for n in range(20)
    ]
    assert feed_text("".join(tables), channel="content") is None


def test_script_soup_fires() -> None:
    """Hopping between four writing systems is degeneration."""
    chunk = ("distance covered 乘以 速度 이동거리는 그의 속도 скорость равна "
             "السرعة الزمن minutes ")
    verdict = feed_text(chunk * 40)
    assert verdict is not None
    assert verdict.detector in {"degeneration", "recurrence", "periodic"}


# Korean: there are no Korean traces, so these are sentences written for the test.
KOREAN_LOOP = (
    "잠깐, 다시 생각해 보자. 기사가 항상 진실을 말한다면 B는 거짓말쟁이여야 한다. "
    "하지만 그러면 B의 말이 거짓이 되므로 A는 진실을 말하지 않는 셈이다. "
)
KOREAN_HEALTHY = [
    "먼저 문제를 정리해 보자. 두 사람 A와 B가 있고, 기사는 항상 진실을 말한다.",
    "A가 기사라고 가정하면 B는 거짓말쟁이이고, B의 말은 거짓이어야 한다.",
    "B는 A가 진실을 말한다고 했으므로 그 말은 참이 되어 모순이 생긴다.",
    "따라서 A는 거짓말쟁이이고, A의 말이 거짓이므로 B는 기사이다.",
    "B가 기사라면 B의 말은 참이어야 하는데, A가 거짓말쟁이이므로 확인이 필요하다.",
    "조건을 하나씩 다시 대입해 보면 두 번째 경우만 모든 문장을 만족한다.",
    "결론적으로 A는 거짓말쟁이, B는 기사라고 답할 수 있다.",
]


def test_korean_loop_fires() -> None:
    """A Korean paragraph repeated verbatim is caught (built from written Korean text)."""
    verdict = feed_text("문제를 읽어 보자.\n" + KOREAN_LOOP * 40)
    assert verdict is not None
    assert verdict.detector in {"recurrence", "periodic"}


def test_korean_reasoning_is_not_a_loop() -> None:
    """Varied Korean reasoning does not fire, even when long."""
    text = "\n".join(f"{i + 1}단계: {s}" for i, s in enumerate(KOREAN_HEALTHY * 3))
    assert feed_text(text) is None


def test_japanese_healthy_traces_do_not_fire() -> None:
    """Real Japanese reasoning (word-based rules are the usual false alarm) stays quiet."""
    japanese = [r for r in load("healthy") if r["lang"] == "ja"][:12]
    assert japanese
    for record in japanese:
        assert feed_text(record["text"].replace("<think>", "").replace("</think>", "")) is None


def test_content_channel_loops_are_caught() -> None:
    """With thinking off the loop is in the content channel, and it is caught there."""
    verdict = feed_text(_shifting_loop(80), channel="content")
    assert verdict is not None
    assert verdict.channel == "content"


def test_content_detection_can_be_switched_off() -> None:
    """content_enabled=False leaves the answer alone."""
    config = DetectorConfig(content_enabled=False)
    assert feed_text(_shifting_loop(80), channel="content", config=config) is None


def test_disabled_detectors_do_not_fire() -> None:
    """Each text detector has its own switch."""
    config = DetectorConfig(
        recurrence_enabled=False, periodic_enabled=False, degeneration_enabled=False,
        sentences_enabled=False,
    )
    assert feed_text(_shifting_loop(80) + "9" * 3000, config=config) is None
