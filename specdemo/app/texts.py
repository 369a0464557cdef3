"""The words the app shows a newcomer, in one place (app.py lays them out)."""

TITLE = """# Speculative decoding, side by side
A small **draft** proposes γ tokens, the **target** checks them all in **one** forward pass: the output is the
target's own, often sooner. Press **Run** and watch both write."""

HOW_IT_WORKS = """Each draft token x is kept with probability min(1, p(x)/q(x)), where p and q are the target's and
the draft's probabilities; at the first refusal the target draws a replacement from norm(max(0, p − q)), and if every
draft is kept it adds a bonus token. The output follows the target's own distribution exactly (in greedy mode: the
very same tokens, up to the rounding of half precision, which the app explains when it matters)."""

INSPECTOR = """Walk through speculative decoding one target forward at a time: what was drafted, the test each
token went through, and at a rejection where the correction comes from."""

THEORY = """Expected tokens per target forward (1 − α^(γ+1)) / (1 − α) and speedup
(1 − α^(γ+1)) / ((1 − α)(γc + 1)), with α the acceptance rate and c the draft's cost relative to the target.
The × marks the last measured run."""

CHECK = """Sample the first k tokens many times with the target alone and with speculative decoding (two
independent sets of seeds), and compare the two distributions with a χ² test."""

METHODS_TAB = (
    "Speedup depends on the task more than on anything else. Where the answer copies the prompt "
    "(edit this code, fix this paragraph, answer from this text) prompt lookup drafts for free and wins; "
    "where questions come back (*chat-again*: the chat prompts asked a second time), suffix decoding proposes "
    "the earlier answers whole; on open-ended text only a draft that knows the target helps. How the table was "
    "measured is folded under it; **Re-measure** runs it here, now."
)

LESSON = """**A workshop's path, about 30 minutes.** Each button sets the race up (the pair, prompt, method, γ and
length the stored measurements chose), opens its tab and starts it; the card above the tabs says what to look at and
asks one question. Start with 1."""
