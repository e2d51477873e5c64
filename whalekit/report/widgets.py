"""The trace viewer's rendering: what an agent actually did, turn by turn, as HTML.

A trajectory renders as a conversation (system / user / assistant, tool calls and their
results), with the verifier's verdict, the behaviour flags, and the completion tokens
RSFT trains on highlighted (generated tokens of accepted trajectories; prompts, tool
results and the harness's prefill never are). Special tokens such as `<|im_end|>` show as
markers beside the text, and a tokenizer's pieces are whole characters (a character split
over several byte-level tokens is shown once, not as broken bytes). A candidate harness
renders as a side-by-side diff of normalised sources against its parent, so quote style
and blank lines never show as changes. `whalekit.report.viewer.browse` (the interactive viewer)
wires runs → candidates → examples → trajectory; without a widget front end it degrades
to static HTML, so executed notebooks still show the traces.

    show_trajectory(run.trajectories("eval-000")[0])          # inline HTML
    viewer.browse("runs", "cpu")                               # the interactive viewer (whalekit.report.viewer)
"""

from __future__ import annotations

import dataclasses
import difflib
import html
import os
import re
from typing import Any

from whalekit.search.archive import Archive, normalise_source
from whalekit.types import Trajectory
from whalekit.weights.rsft_loss import training_sequences

ROLE_COLOURS = {"system": "#F2F2F2", "user": "#EAF2FB", "assistant": "#FFFFFF"}
TRAINED_BACKGROUND = "#C8F0C8"
HEADLESS_ENV = "WHALEKIT_HEADLESS"  # set (to 1) where no widget front end will ever attach
SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")  # chat-template tokens such as <|im_end|>
_MAX_CHARACTER_TOKENS = 8  # a UTF-8 character spans at most 4 bytes; past this, show the bytes as they are
# JupyterLab styles tables in rendered output right-aligned with collapsed white space; the
# diff overrides that (left-aligned, monospace, scrolling inside its own box).
_STYLE = ("<style>.wk-trace{font-family:sans-serif;font-size:13px;max-width:980px;text-align:left}"
          ".wk-msg{border:1px solid #DDD;border-radius:4px;margin:4px 0;padding:4px 8px}"
          ".wk-msg pre,.wk-trace pre{white-space:pre-wrap;margin:2px 0;font-size:12px;text-align:left}"
          ".wk-role{font-weight:bold;font-size:11px;color:#555}"
          ".wk-tok{border-right:1px solid #9C9}.wk-prefill{color:#888;font-style:italic}"
          ".wk-special{font-size:10px;color:#555;background:#E4E4E4;border:1px solid #AAA;border-radius:3px;"
          "padding:0 3px;margin:0 2px;font-style:normal}"
          ".wk-head{display:flex;flex-wrap:wrap;gap:2px 14px;margin:2px 0 4px}.wk-head span{white-space:nowrap}"
          ".wk-diff{overflow:auto;max-height:560px;max-width:100%;border:1px solid #DDD}"
          ".wk-diff table.diff{font-size:11px;font-family:monospace;border-collapse:collapse;table-layout:auto}"
          ".wk-diff table.diff td,.wk-diff table.diff th{text-align:left !important;white-space:pre !important;"
          "vertical-align:top;padding:0 4px;line-height:1.3;font-family:monospace}"
          ".wk-diff td.diff_header{text-align:right !important;color:#888}"
          ".diff_add{background:#C8F0C8}.diff_chg{background:#FFF2A8}.diff_sub{background:#F8C8C8}</style>")


def escape(text: Any) -> str:
    """Text as HTML, every character shown literally (model output included)."""
    return html.escape(str(text))


def special_marker(token: str) -> str:
    """A special token as a marker: shown, but visibly not part of the text."""
    name = token.strip("<|>") or token
    return f"<span class='wk-special' title='special token {escape(token)}'>{escape(name)}</span>"


def text_html(text: str) -> str:
    """Escaped text with every special token (`<|im_end|>`, ...) as a marker."""
    parts, last = [], 0
    for match in SPECIAL_TOKEN.finditer(text):
        parts += [escape(text[last:match.start()]), special_marker(match.group())]
        last = match.end()
    return "".join(parts) + escape(text[last:])


def token_pieces(tokenizer: Any, ids: list[int]) -> list[tuple[list[int], str, bool]]:
    """Completion ids as (ids, text, special) pieces of whole characters: consecutive
    tokens that each hold part of one UTF-8 character are decoded together (byte-level
    BPE splits most non-ASCII characters), and special tokens stand apart."""
    special = set(getattr(tokenizer, "all_special_ids", None) or [])
    pieces: list[tuple[list[int], str, bool]] = []
    pending: list[int] = []
    for token_id in ids:
        if token_id in special:
            if pending:
                pieces.append((pending, tokenizer.decode(pending), False))
                pending = []
            pieces.append(([token_id], tokenizer.decode([token_id]), True))
            continue
        pending.append(token_id)
        text = tokenizer.decode(pending)
        if text.endswith("\ufffd") and len(pending) < _MAX_CHARACTER_TOKENS:
            continue  # the character's remaining bytes come in the next token(s)
        pieces.append((pending, text, False))
        pending = []
    if pending:
        pieces.append((pending, tokenizer.decode(pending), False))
    return pieces


def trained_turns(trajectory: Trajectory, accepted: bool | None = None, max_seq_len: int = 1024) -> list[bool]:
    """Per turn: are its completion tokens part of RSFT's training batch? Exactly the rule
    of `whalekit.weights.rsft_loss.training_sequences`: the trajectory was accepted (default: the
    verifier judged it correct), the turn generated tokens, and prompt + completion fit
    in `max_seq_len`."""
    accepted = trajectory.correct if accepted is None else accepted
    if not accepted:
        return [False] * len(trajectory.turns)
    return [bool(training_sequences(dataclasses.replace(trajectory, turns=[turn]), max_seq_len)[0])
            for turn in trajectory.turns]


def trained_token_count(trajectories: list[Trajectory], max_seq_len: int = 1024) -> tuple[int, int]:
    """(generated tokens RSFT would train on, generated tokens in all): a batch's share."""
    trained = sum(len(turn.completion_ids) for t in trajectories
                  for turn, on in zip(t.turns, trained_turns(t, None, max_seq_len)) if on)
    return trained, sum(t.generated_tokens for t in trajectories)


def _completion_html(turn: Any, trained: bool, tokenizer: Any) -> str:
    prefill = f"<span class='wk-prefill' title='prefill: part of the prompt'>{text_html(turn.prefill)}</span>" \
        if turn.prefill else ""
    background = f"background:{TRAINED_BACKGROUND}" if trained else ""
    if tokenizer is not None and turn.completion_ids:
        body = "".join(special_marker(text) if special else
                       f"<span class='wk-tok' title='id {' '.join(map(str, ids))}'>{escape(text)}</span>"
                       for ids, text, special in token_pieces(tokenizer, turn.completion_ids))
    else:
        body = text_html(turn.text)
    return f"<pre>{prefill}<span style='{background}'>{body}</span></pre>"


def trajectory_html(trajectory: Trajectory, accepted: bool | None = None, tokenizer: Any = None,
                    max_seq_len: int = 1024, title: str = "") -> str:
    """The whole trajectory as one self-contained HTML fragment (see `show_trajectory`)."""
    trained = trained_turns(trajectory, accepted, max_seq_len)
    verdict = "correct" if trajectory.correct else "wrong"
    colour = "#1B7F1B" if trajectory.correct else "#B22222"
    trained_tokens = sum(len(t.completion_ids) for t, on in zip(trajectory.turns, trained) if on)
    flags = ", ".join(f"{escape(k)}={escape(v)}" for k, v in sorted(trajectory.flags.items())) or "none"
    # A wrapping row of unbreakable fields: JupyterLab's table styling would squeeze a table's cells
    # into broken words ("task math-" / "seven") next to a long title.
    head = (f"<div class='wk-head'><span><b>{escape(title or trajectory.task_id)}</b></span>"
            f"<span>task {escape(trajectory.task_id)}</span>"
            f"<span>harness {escape(trajectory.harness_id)}</span><span>sample {trajectory.sample_index}</span>"
            f"<span>weights v{trajectory.policy_version}</span><span>subset {escape(trajectory.subset)}</span></div>"
            f"<div>verdict: <b style='color:{colour}'>{verdict}</b> (reward {trajectory.reward:g}); "
            f"final answer: <code>{escape(trajectory.final_answer)}</code>"
            + (f"; ended: <code>{escape(trajectory.error)}</code>" if trajectory.error else "") + "</div>"
            f"<div>behaviour flags: {flags}</div>"
            f"<div>trained on: <span style='background:{TRAINED_BACKGROUND}'>{trained_tokens} generated tokens"
            f"</span> of {trajectory.generated_tokens} (RSFT trains only on completions of accepted trajectories;"
            " <span class='wk-prefill'>prefill</span>, prompts and tool results never)</div>")
    parts = [_STYLE, "<div class='wk-trace'>", head]
    turn_index = 0
    for message in trajectory.messages:
        turn = trajectory.turns[turn_index] if turn_index < len(trajectory.turns) else None
        if message.role == "assistant" and message.kind != "few_shot" and turn is not None \
                and turn.text.strip() in message.content:
            parts.append(_turn_html(turn, turn_index, trained[turn_index], tokenizer))
            turn_index += 1
            continue
        label = message.role + ("" if message.kind == "text" else f" · {message.kind}")
        parts.append(f"<div class='wk-msg' style='background:{ROLE_COLOURS.get(message.role, '#FFF')}'>"
                     f"<div class='wk-role'>{escape(label)}</div><pre>{text_html(message.content)}</pre></div>")
    for index in range(turn_index, len(trajectory.turns)):  # turns whose reply was never appended
        parts.append(_turn_html(trajectory.turns[index], index, trained[index], tokenizer))
    parts.append("</div>")
    return "".join(parts)


def _turn_html(turn: Any, index: int, trained: bool, tokenizer: Any) -> str:
    meta = f"assistant · turn {index + 1} · {len(turn.completion_ids)} tokens · finish: {turn.finish_reason}"
    out = [f"<div class='wk-msg'><div class='wk-role'>{escape(meta)}</div>",
           _completion_html(turn, trained, tokenizer)]
    if turn.parse_error:
        out.append(f"<div style='color:#B22222'>format error: {escape(turn.parse_error)}</div>")
    for call in turn.tool_calls:
        out.append(f"<div class='wk-call'>tool call <b>{escape(call.name)}</b>(<code>{escape(call.arguments)}</code>)"
                   "</div>")
    for result in turn.tool_results:  # what the model saw of it follows as a tool_result message
        status = "ok" if result.ok else f"error: {result.error}"
        out.append(f"<details><summary>tool result · {escape(result.name)} · {escape(status)}</summary>"
                   f"<pre>{text_html(result.output)}</pre></details>")
    out.append("</div>")
    return "".join(out)


def diff_html(parent_source: str, child_source: str, parent_label: str = "parent", child_label: str = "candidate",
              context: int | None = 3, normalise: bool = True) -> str:
    """A side-by-side HTML diff of two harness sources (changed lines in context), left
    aligned and scrolling in its own box. `normalise` (default) compares the sources
    through ast.unparse, so only real edits show (comments and formatting do not)."""
    if normalise:
        parent_source, child_source = normalise_source(parent_source), normalise_source(child_source)
    if parent_source == child_source:
        return _STYLE + "<div class='wk-trace'>no change" + (" (after normalisation)" if normalise else "") + "</div>"
    table = difflib.HtmlDiff(wrapcolumn=90).make_table(parent_source.splitlines(), child_source.splitlines(),
                                                       escape(parent_label), escape(child_label),
                                                       context=context is not None, numlines=context or 0)
    note = "<div style='font-size:11px;color:#666'>sources normalised (ast.unparse): formatting and comments " \
           "are not shown as changes</div>" if normalise else ""
    return _STYLE + f"<div class='wk-trace'>{note}<div class='wk-diff'>{table}</div></div>"


def candidate_diff_html(archive: Archive, candidate_id: str, parent_id: str | None = None) -> str:
    """A candidate of an archive against its parent (default: its first parent; the seed
    h0 when it has none)."""
    entry = archive.entry(candidate_id)
    parent = parent_id or (entry.parent_ids[0] if entry.parent_ids else archive.seed_id())
    head = (f"<div class='wk-trace'><b>{escape(candidate_id)}</b> ← {escape(parent)} · {escape(entry.proposer)} · "
            f"status {escape(entry.status)}<br>hypothesis: {escape(entry.hypothesis)}<br>"
            f"change: {escape(entry.change_summary)}</div>")
    return head + diff_html(archive.source(parent), archive.source(candidate_id), parent, candidate_id)


def show_html(html_text: str) -> None:
    """Show HTML inline in the notebook (static: survives papermill and exports)."""
    from IPython.display import HTML, display

    display(HTML(html_text))


def show_trajectory(trajectory: Trajectory, accepted: bool | None = None, tokenizer: Any = None,
                    max_seq_len: int = 1024) -> None:
    """Render one trajectory inline (static HTML: works under papermill and in exports)."""
    show_html(trajectory_html(trajectory, accepted, tokenizer, max_seq_len))


def show_diff(archive: Archive, candidate_id: str, parent_id: str | None = None) -> None:
    show_html(candidate_diff_html(archive, candidate_id, parent_id))


def widgets_available() -> bool:
    """True when ipywidgets imports and a Jupyter kernel runs us, unless the run is
    headless: a kernel cannot see whether a front end is attached, so headless drivers
    (`whalekit.repro.notebook_runner`, the notebook tests) set WHALEKIT_HEADLESS=1 for the kernels
    they start."""
    if os.environ.get(HEADLESS_ENV, "") not in ("", "0"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")

