"""Script soup counts the writing systems of the last eight blocks, and only those."""

from __future__ import annotations

from detectors import DetectorConfig
from detectors.blocks import BLOCK_CHARS, Blocker
from detectors.degeneration import DegenerationAnalyzer

LATIN = "we check the next step, then we move on. "
CYRILLIC = "скорость равна расстоянию делённому на время, "
HANGUL = "이동거리는 그의 속도 곱하기 시간이다, "
ARABIC = "السرعة تساوي المسافة على الزمن، "


def _block_text(words: str = "") -> str:
    """One block's worth of text: ``words`` twice (at least eight words of its script),
    then Latin prose, cut to exactly one block and ending with a space so no word carries
    into the next block."""
    text = words * 2 + LATIN * 8
    return text[: BLOCK_CHARS - 1] + " "


def _soup_at(pieces: list[str]) -> list[tuple[int, str]]:
    """(block number, reason) of every script-soup finding of the default analyzer, fed
    ``pieces`` one block each."""
    cfg = DetectorConfig()
    analyzer = DegenerationAnalyzer(cfg.salad_run_tokens, cfg.symbol_run_tokens,
                                    cfg.script_mix, cfg.script_min_tokens)
    blocker = Blocker()
    found = []
    for i, piece in enumerate(pieces):
        blocks = blocker.push(piece)
        assert blocks is not None
        assert len(blocks) == 1
        finding = analyzer.analyze(blocks[0])
        if finding is not None:
            found.append((i, finding.reason))
    return found


def test_four_writing_systems_within_eight_blocks_fire() -> None:
    """Cyrillic in block 0, Hangul in 4 and Arabic in 7 are within one window of eight
    blocks, with the Latin prose around them: four systems, a finding at block 7."""
    pieces = [_block_text() for _ in range(8)]
    pieces[0], pieces[4], pieces[7] = (_block_text(CYRILLIC), _block_text(HANGUL),
                                       _block_text(ARABIC))
    found = _soup_at(pieces)
    assert found[0][0] == 7
    assert found[0][1].startswith("words from 4 writing systems at once")
    assert "Cyrillic" in found[0][1]
    assert "Arabic" in found[0][1]


def test_a_block_older_than_the_window_is_forgotten() -> None:
    """The same three scripts, Arabic one block later (block 8): the window then holds
    blocks 1 to 8, Cyrillic has left it, and three systems do not fire; Cyrillic once
    more (block 9) makes four again."""
    pieces = [_block_text() for _ in range(10)]
    pieces[0], pieces[4], pieces[8], pieces[9] = (
        _block_text(CYRILLIC), _block_text(HANGUL), _block_text(ARABIC), _block_text(CYRILLIC))
    found = _soup_at(pieces)
    assert [i for i, _ in found] == [9]


def test_scripts_count_after_a_latin_only_stretch_and_leave_again() -> None:
    """After 20 blocks of Latin alone (where only the Latin count is kept), three other
    systems within eight blocks fire at the third; once they have all left the window (ten
    Latin blocks later) they count afresh, and fire again when all three are back."""
    pieces = [_block_text() for _ in range(50)]
    for at, words in ((20, CYRILLIC), (24, HANGUL), (27, ARABIC),
                      (38, CYRILLIC), (41, HANGUL), (45, ARABIC)):
        pieces[at] = _block_text(words)
    found = [i for i, _ in _soup_at(pieces)]
    assert found[0] == 27
    assert 38 not in found
    assert 45 in found
    assert all(i <= 28 or i >= 45 for i in found)
