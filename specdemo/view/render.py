"""Step records → coloured token text: HTML for the app, ANSI for the terminal.

Each drafted token is shown in place with its verdict: accepted, rejected (struck through),
the target's correction at a rejection, and the bonus token after a fully accepted draft.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from specdemo.decoding import methods
from specdemo.decoding.methods import DEFAULT_SIDES
from specdemo.measure.diagnosis import question

KINDS = {
    # kind: (label, explanation, css colour, ANSI code)
    "accepted": ("accepted", "drafted and kept by the target", "#c8f7c5", "42;30"),
    "rejected": ("rejected", "drafted, then refused by the target (struck through)", "#f8c4c4", "9;31"),
    "correction": ("correction", "the target's own token at the first rejection", "#fde2a7", "43;30"),
    "bonus": ("bonus", "extra token from the target after every draft was kept", "#bcd9ff", "44;30"),
    "unverified": ("unverified", "written by the draft alone and never checked (naive method)", "#e2d4f7", "45;30"),
    # the target's own token with no kept draft before it: every baseline token, uncoloured
    "target": ("target", "the target's own token, no draft kept (uncoloured)", "transparent", "0"),
}


def token_spans(
    steps: Iterable, decode, reference: Sequence[int] | None = None, mark: int | None = None
) -> Iterable[dict]:
    """One dict per shown token: text, kind, step index, and p, q, min(1, p/q) for drafts.

    With ``reference`` (the baseline's tokens), each output token that differs from the
    baseline's token at the same position gets ``differs=True``; the output token at position
    ``mark`` (the first divergence) gets ``marked=True``."""
    position = 0
    for span in _spans(steps, decode):
        if span["kind"] != "rejected":
            span["differs"] = reference is not None and position < len(reference) and reference[position] != span["id"]
            span["marked"] = position == mark
            position += 1
        yield span


def _spans(steps: Iterable, decode) -> Iterable[dict]:
    for step in steps:
        kept = step.emitted
        if step.tree_parents:
            # a tree step: the accepted path in order (the other branches are in the tree plot)
            shown = [(n, step.drafted[n]) for n in step.tree_path[: len(kept)]]
        else:
            shown = list(enumerate(step.drafted))
        for i, (node, tok) in enumerate(shown):
            if i >= len(kept) and step.correction is None and step.bonus is None:
                break  # the text ended at an EOS among the kept drafts: nothing after it was checked
            kind = "accepted" if i < step.accepted else "rejected"
            span = {"text": decode(tok), "kind": kind, "step": step.index, "id": tok, "tree": bool(step.tree_parents)}
            if step.draft_source:
                span["source"] = source_text(step.draft_source, decode)
            if node < len(step.p):  # a remote engine (vLLM) streams the tokens without p and q
                span |= {
                    "p": step.p[node],
                    "q": step.q[node],
                    "ratio": step.accept_prob[node],
                    "u": step.draws[node] if node < len(step.draws) and not step.tree_parents else None,
                }
            yield span
        if len(kept) > step.accepted:
            if not step.drafted:
                kind = "unverified" if step.unverified else "target"
            else:
                kind = "correction" if step.correction is not None else "bonus"
            yield {
                "text": decode(kept[-1]),
                "kind": kind,
                "step": step.index,
                "id": kept[-1],
                "tree": bool(step.tree_parents),
            }


SOURCES = {
    "prompt": "the prompt",
    "answer": "this answer, further back",
    "earlier answer": "an earlier answer",
    "several places": "several earlier texts at once",
}


def source_text(source: dict, decode) -> str:
    """Suffix decoding: where the proposal was seen, and the text around it there."""
    seen = "".join(decode(t) for t in source["ids"])
    return f"proposed from {SOURCES[source['from']]}" + (f": “{seen}”" if seen else "")


# The tree's sampling rule (SpecInfer's multi-round test, one-hot candidates): see tree.py.
TREE_RULE = (
    "tree: the candidates at a node are tested in turn, each kept with probability p′(x), "
    "where p′ is p with the mass of the candidates refused before it removed"
)


def hover_text(span: dict, greedy: bool) -> str:
    tree = span.get("tree", False)
    if "p" not in span:
        if greedy:
            what = {"correction": "the target's correction: its argmax", "bonus": "bonus: the target's argmax"}
        elif tree:
            what = {
                "correction": "the target's token after every candidate was refused: drawn from p′ (" + TREE_RULE + ")",
                "bonus": "bonus: the path reached a leaf, one more token drawn from p",
            }
        else:
            what = {
                "correction": "the target's correction: drawn from norm(max(0, p − q))",
                "bonus": "bonus: drawn from p after every draft was kept",
            }
        what |= {
            "target": "the target's token",
            "unverified": "written by the draft alone: nobody checked it",
            "accepted": "a draft token the target kept (this engine does not report p and q)",
        }
        return what[span["kind"]]
    text = f"p={span['p']:.3f}  q={span['q']:.3f}"
    if greedy:
        return text + "  (greedy: kept iff it is the target's argmax)"
    if tree:
        return text + "  " + TREE_RULE
    text += f"  min(1, p/q)={span['ratio']:.3f}"
    if span.get("u") is not None:
        verdict = "<" if span["kind"] == "accepted" else "≥"
        text += f"  u={span['u']:.3f} {verdict} p/q"
    return text


PROMPT_SHOWN = 200  # characters of the prompt echoed before an answer (its end: where the answer follows on)


def tokens_html(spans: Iterable[dict], greedy: bool = True, prompt: str = "") -> str:
    """Inline coloured tokens after the (grey) prompt, a long one cut to its end. All text is HTML-escaped."""
    if len(prompt) > PROMPT_SHOWN:
        prompt = "…" + prompt[-PROMPT_SHOWN:]
    parts = [f'<span class="prompt" style="color:#888">{html.escape(prompt)}</span>'] if prompt else []
    for span in spans:
        label, _, colour, _ = KINDS[span["kind"]]
        style = f"background:{colour};"
        if span["kind"] == "rejected":
            style += "text-decoration:line-through;opacity:0.75;"
        hover = hover_text(span, greedy)
        if span.get("source"):
            hover += "  · " + span["source"]
        if span.get("differs"):
            style += "border-bottom:2px dashed #d00000;"
            hover += "  · differs from the baseline here"
        if span.get("marked"):
            style += "outline:2px solid #d00000;"
            hover += "  · the first token where the two outputs differ (see “why?” below)"
        text = html.escape(span["text"]).replace("\n", "↵<br>")
        title = html.escape(hover, quote=True)
        parts.append(f'<span class="tok tok-{label}" style="{style}" title="{title}">{text}</span>')
    return '<div class="tokens" style="white-space:pre-wrap;line-height:1.9">' + "".join(parts) + "</div>"


# auto's sources in the lane under the speculative pane: a colour each (the no-draft step grey)
CHOICE_COLOURS = {"none": "#d0d0d0", "prompt": "#9ecae1", "suffix": "#c6a0e0", "model": "#fdae6b"}


def choices_html(steps: Sequence) -> str:
    """auto's lane: one chip per step, the source's colour and γ, its reason on hover ("" for other methods)."""
    from specdemo.decoding.auto import LABELS

    chips = []
    for s in steps:
        if not s.draft_choice:
            continue
        c = s.draft_choice
        title = html.escape(f"step {s.index}: {c['reason']}", quote=True)
        chips.append(
            f'<span class="choice choice-{c["source"]}" style="background:{CHOICE_COLOURS[c["source"]]}" '
            f'title="{title}">{c["gamma"]}</span>'
        )
    if not chips:
        return ""
    key = " ".join(
        f'<span class="choice" style="background:{colour}">{html.escape(LABELS[source])}</span>'
        for source, colour in CHOICE_COLOURS.items()
    )
    return (
        f'<div class="choices"><small>auto\'s choice each step (γ drafted; hover for why): {key}</small><br>'
        + "".join(chips)
        + "</div>"
    )


def legend_html(kinds: Sequence[str] = ("accepted", "rejected", "correction", "bonus"), compact: bool = False) -> str:
    """The colours and what each means; ``compact``: one line of chips, each meaning on hover."""
    items = []
    for kind in kinds:
        label, meaning, colour, _ = KINDS[kind]
        deco = "text-decoration:line-through;" if kind == "rejected" else ""
        chip = f'<span class="tok tok-{label}" style="background:{colour};{deco}padding:0 4px"'
        if compact:
            items.append(f'{chip} title="{html.escape(meaning, quote=True)}">{label}</span>')
        else:
            items.append(f"{chip}>{label}</span> {meaning}")
    tail = " &nbsp; hover a token for its p, q and test" if compact else ""
    return '<div class="legend">' + " &nbsp; ".join(items) + tail + "</div>"


def tokens_ansi(spans: Iterable[dict]) -> str:
    return "".join(f"\x1b[{KINDS[s['kind']][3]}m{s['text']}\x1b[0m" for s in spans)


def plain_text(steps: Sequence, decode) -> str:
    return "".join(decode(t) for s in steps for t in s.emitted)


def pane_titles(method: str) -> tuple[str, str]:
    """The headings over the two panes (Markdown): what each side of this race is."""
    left, right = methods.get(method).panes
    return f"### {left}", f"### {right}"


def summary_html(summary: dict, greedy: bool, lossless: bool) -> str:
    """The numbers under the panes, each with a few words on what it means. A run too short to time
    claims no speedup; one stopped before any step has nothing to compare."""
    if summary.get("nothing"):
        cells = "<th>stopped</th><td class='value'>–</td><td>before either side made a step: nothing to compare</td>"
        return f"<table class='summary'><tr>{cells}</tr></table>"
    left, right, ratio = summary.get("sides", DEFAULT_SIDES)
    if left == DEFAULT_SIDES[0]:
        left_means, right_means = "the target alone", "same target, with drafts"
    else:  # one engine against another, both speculative
        left_means, right_means = "its server", "this process"
    rows = [
        (left, f"{summary['baseline_tokens_per_second']:.1f} tokens/s", left_means),
        (right, f"{summary['speculative_tokens_per_second']:.1f} tokens/s", right_means),
        ("speedup", speedup_text(summary), ratio),
    ]
    summed = summary.get("summed_speedup")
    if summary.get("done") and summed and not summary.get("too_short") and abs(summed / summary["speedup"] - 1) > 0.05:
        rows.append(
            (
                "summed clocks",
                f"{summed:.2f}×",
                "the two sides' clocks added up (the race plot): some steps ran slow, as when something else uses "
                "these cores; the speedup above reads each side's typical step",
            )
        )
    if summary.get("server_acceptance_rate") is not None:
        rows.append((f"{left}: acceptance", f"{summary['server_acceptance_rate']:.0%}", "from its /metrics"))
    if "acceptance_rate" in summary:
        rows += [
            (
                "acceptance",
                "–" if summary["acceptance_rate"] is None else f"{summary['acceptance_rate']:.0%}",  # none drafted yet
                "share of drafted tokens the target kept",
            ),
            ("τ", f"{summary['mean_accepted_tokens']:.2f}", "tokens emitted per target forward"),
        ]
        if positions := summary.get("alpha_per_position"):
            rows.append(
                (
                    "α by position",
                    " / ".join(f"{a:.0%}" for a in positions[:6]),
                    "share kept at draft position 1, 2, … (of those reached: the ones before were kept)",
                )
            )
        if shares := summary.get("choice_shares"):
            rows.append(
                (
                    "auto drafted from",
                    " · ".join(f"{label} {share:.0%}" for label, share in shares.items()),
                    "the share of the tokens made by the steps that drafted from each (auto chooses every step: "
                    "the lane under the pane)",
                )
            )
        rows += [
            (
                "forwards saved",
                f"{summary['target_forwards_saved']}",
                f"{summary['target_forwards']} target forwards instead of {summary['speculative_tokens']}",
            ),
        ]
    if summary.get("busy") and summary.get("done"):
        rows.append(
            (
                "busy machine",
                "uneven steps",
                "the target's steps ran unevenly (something else used these cores: a browser on the same machine "
                "counts); the speedup reads each side's typical step, yet may move a little from run to run: the "
                "Benchmark tab gives the steadiest figure",
            )
        )
    if why := summary.get("limited_by"):
        rows.append((question(why["term"], summary["speedup"]), why["term"], why["text"]))
    diff = summary["first_difference"]
    if not lossless:
        verdict = ("✗ differs from the baseline from token " + str(diff)) if diff is not None else "same so far"
        rows.append(("output", verdict, "NOT lossless: the draft's half was never checked"))
    elif not greedy:
        rows.append(
            (
                "output",
                "sampled",
                "both sides draw their own random tokens, so the texts differ; each is a sample from the target's "
                "distribution (the Losslessness check tab tests that they agree)",
            )
        )
    else:
        rows.append(
            (
                f"identical to {left} ({summary.get('dtype', 'float32')})",
                "✓" if diff is None else f"✗ differs at token {diff}",
                "greedy speculative decoding reproduces the baseline token for token in exact arithmetic",
            )
        )
    cells = "".join(
        f"<tr><th>{html.escape(k)}</th><td class='value'>{html.escape(v)}</td><td>{html.escape(m)}</td></tr>"
        for k, v, m in rows
    )
    return f"<table class='summary'>{cells}</table>" + divergence_html(summary.get("divergence"))


def speedup_text(summary: dict) -> str:
    if not summary.get("too_short"):
        return f"{summary['speedup']:.2f}×"
    if not summary.get("done"):
        return "– (measuring…)"
    tokens = min(summary["baseline_tokens"], summary["speculative_tokens"])
    return f"– (too short to time: {tokens} token{'s' * (tokens != 1)}; ask for more)"


def divergence_html(why: dict | None) -> str:
    """ "differs at token N — why?", opening the explanation (top-2 gaps in both computations)."""
    if not why:
        return ""
    return (
        f"<details class='divergence' open><summary><b>differs at token {why['position']} — why?</b></summary>"
        f"<p>{html.escape(why['verdict'])}.</p><p>At token {why['position']} the target's two best tokens are "
        f"almost equally likely. The baseline scores one token per forward; the verify scores γ+1 tokens in one "
        f"batched forward, and in {html.escape(why['dtype'])} the two shapes of matrix product round differently, "
        "so here they pick different winners. Both texts are the target's greedy output up to that rounding; "
        "from this token on they follow different paths. In float32 the gap is far larger than the rounding, "
        "and the outputs are identical (choose dtype float32 under Advanced).</p></details>"
    )


def verdicts(step) -> list[str]:
    """What happened to each drafted token of a chain step."""
    out = []
    for i in range(len(step.drafted)):
        if i < step.accepted:
            out.append("accepted")
        elif i == step.accepted:
            out.append("rejected")
        else:
            out.append("discarded (after a rejection)")
    return out


def step_table_html(step, decode, greedy: bool) -> str:
    """The inspector's table: each drafted token with q(x), p(x), the rule's test (sampling: min(1, p/q)
    and u; greedy: whether the target's argmax is the draft) and the verdict."""
    if step.tree_parents:
        status = ["accepted" if i in step.tree_path else "not on the accepted path" for i in range(len(step.drafted))]
    else:
        status = verdicts(step)
    # Greedy does not use min(1, p/q) or u: the rule is "kept while it is the target's argmax".
    columns = ["#", "token", "q(x)", "p(x)", *(["rule"] if greedy else ["min(1, p/q)", "u"]), "verdict"]
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
    rows = []
    for i, tok in enumerate(step.drafted):
        if greedy:
            if step.tree_parents:
                rule = "argmax = draft" if i in step.tree_path else "–"
            else:
                rule = "argmax = draft" if i < step.accepted else ("argmax ≠ draft" if i == step.accepted else "–")
            middle = f"<td>{rule}</td>"
        else:
            u = f"{step.draws[i]:.3f}" if i < len(step.draws) and not step.tree_parents else "–"
            middle = f"<td>{step.accept_prob[i]:.3f}</td><td>{u}</td>"
        rows.append(
            f"<tr class='{status[i].split()[0]}'><td>{i + 1}</td><td><code>{html.escape(repr(decode(tok)))}</code></td>"
            f"<td>{step.q[i]:.3f}</td><td>{step.p[i]:.3f}</td>{middle}<td>{status[i]}</td></tr>"
        )
    last = step.emitted[-1] if step.emitted else None
    if step.correction is not None:
        if greedy:
            how = "the target's argmax"
        else:
            how = "the target's draw from " + ("p′" if step.tree_parents else "norm(max(0, p − q))")
        tail = f"correction <code>{html.escape(repr(decode(step.correction)))}</code>: {how}"
    elif step.bonus is not None and step.drafted:
        tail = f"bonus <code>{html.escape(repr(decode(step.bonus)))}</code>: every draft kept, one more from p"
    elif last is not None:
        tail = f"target token <code>{html.escape(repr(decode(last)))}</code>"
    else:
        tail = ""
    if greedy:
        rule = "greedy: a draft is kept while it equals the target's argmax"
    elif step.tree_parents:
        rule = TREE_RULE + "; if all are refused, the token is drawn from p′ (the min(1, p/q) column does not apply)"
    else:
        rule = "kept when u < min(1, p(x)/q(x)); the first refusal ends the step"
    choice = f"<p class='choice'>auto chose {html.escape(step.draft_choice['reason'])}</p>" if step.draft_choice else ""
    return (
        f"<p><b>Step {step.index}</b>: {len(step.drafted)} drafted, {step.accepted} accepted; {tail}. "
        f"<i>{rule}</i></p>{choice}<table class='inspector'>{head}{''.join(rows)}</table>"
    )


def table_html(
    headers: list[str], rows: list[list[str]], note: str = "", css_class: str = "bench", provenance: str = ""
) -> str:
    """A plain HTML table (scrolls sideways inside its box if it must), with a note under it and how it
    was measured folded away (machine, date, command: for whoever asks, not in the reader's way)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    caption = f"<p class='note'>{html.escape(note)}</p>" if note else ""
    if provenance:
        caption += f"<details class='note'><summary>How this was measured</summary>{html.escape(provenance)}</details>"
    return f"<div style='overflow-x:auto'><table class='{css_class}'><tr>{head}</tr>{body}</table></div>{caption}"
