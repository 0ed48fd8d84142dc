"""The simulated model, pure and synchronous: which tokens each ``sim-*`` model says
(:mod:`.behaviours`), what vLLM's engine and reasoning parser make of them
(:mod:`.generation`), the pseudo-tokenizer and chat template (:mod:`.tokenizer`), the
request it runs (:mod:`.job`) and the faults a request may ask for (:mod:`.faults`)."""
