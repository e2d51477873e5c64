"""The trace viewer: read what an agent actually did, turn by turn, inside a notebook.

A trajectory renders as a conversation (system / user / assistant, tool calls and their
results), with the verifier's verdict, the behaviour flags, and the completion tokens
RSFT trains on highlighted (generated tokens of accepted trajectories; prompts, tool
results and the harness's prefill never are). A candidate harness renders as a
side-by-side diff against its parent. `browse` wires runs → harness candidates →
examples → trajectory together with ipywidgets; without a widget front end (papermill,
a plain HTML export) everything degrades to static HTML, so executed notebooks still
show the traces.

    show_trajectory(run.trajectories("eval-000")[0])          # inline HTML
    browse("runs", "cpu")                                      # the interactive viewer
"""

from __future__ import annotations

import dataclasses
import difflib
import html
from pathlib import Path
from typing import Any

from whalekit.types import Trajectory

ROLE_COLOURS = {"system": "#F2F2F2", "user": "#EAF2FB", "assistant": "#FFFFFF"}
TRAINED_BACKGROUND = "#C8F0C8"
HEADLESS_ENV = "WHALEKIT_HEADLESS"  # set (to 1) where no widget front end will ever attach
_STYLE = ("<style>.wk-trace{font-family:sans-serif;font-size:13px;max-width:980px}"
          ".wk-msg{border:1px solid #DDD;border-radius:4px;margin:4px 0;padding:4px 8px}"
          ".wk-msg pre,.wk-trace pre{white-space:pre-wrap;margin:2px 0;font-size:12px}"
          ".wk-role{font-weight:bold;font-size:11px;color:#555}"
          ".wk-tok{border-right:1px solid #9C9}.wk-prefill{color:#888;font-style:italic}"
          ".wk-head td{padding:0 10px 0 0}table.diff{font-size:11px;font-family:monospace}"
          ".diff_add{background:#C8F0C8}.diff_chg{background:#FFF2A8}.diff_sub{background:#F8C8C8}</style>")


def _esc(text: Any) -> str:
    return html.escape(str(text))


def trained_turns(trajectory: Trajectory, accepted: bool | None = None, max_seq_len: int = 1024) -> list[bool]:
    """Per turn: are its completion tokens part of RSFT's training batch? Exactly the rule
    of `whalekit.rsft.training_sequences`: the trajectory was accepted (default: the
    verifier judged it correct), the turn generated tokens, and prompt + completion fit
    in `max_seq_len`."""
    from whalekit.rsft import training_sequences

    accepted = trajectory.correct if accepted is None else accepted
    if not accepted:
        return [False] * len(trajectory.turns)
    return [bool(training_sequences(dataclasses.replace(trajectory, turns=[turn]), max_seq_len)[0])
            for turn in trajectory.turns]


def _completion_html(turn: Any, trained: bool, tokenizer: Any) -> str:
    prefill = f"<span class='wk-prefill' title='prefill: part of the prompt'>{_esc(turn.prefill)}</span>" \
        if turn.prefill else ""
    background = f"background:{TRAINED_BACKGROUND}" if trained else ""
    if tokenizer is not None and turn.completion_ids:
        pieces = [tokenizer.decode([token_id]) for token_id in turn.completion_ids]
        body = "".join(f"<span class='wk-tok' title='id {i}'>{_esc(p)}</span>"
                       for i, p in zip(turn.completion_ids, pieces))
    else:
        body = _esc(turn.text)
    return f"<pre>{prefill}<span style='{background}'>{body}</span></pre>"


def trajectory_html(trajectory: Trajectory, accepted: bool | None = None, tokenizer: Any = None,
                    max_seq_len: int = 1024, title: str = "") -> str:
    """The whole trajectory as one self-contained HTML fragment (see `show_trajectory`)."""
    trained = trained_turns(trajectory, accepted, max_seq_len)
    verdict = "correct" if trajectory.correct else "wrong"
    colour = "#1B7F1B" if trajectory.correct else "#B22222"
    trained_tokens = sum(len(t.completion_ids) for t, on in zip(trajectory.turns, trained) if on)
    flags = ", ".join(f"{_esc(k)}={_esc(v)}" for k, v in sorted(trajectory.flags.items())) or "none"
    head = (f"<table class='wk-head'><tr><td><b>{_esc(title or trajectory.task_id)}</b></td>"
            f"<td>harness {_esc(trajectory.harness_id)}</td><td>sample {trajectory.sample_index}</td>"
            f"<td>weights v{trajectory.policy_version}</td><td>subset {_esc(trajectory.subset)}</td></tr></table>"
            f"<div>verdict: <b style='color:{colour}'>{verdict}</b> (reward {trajectory.reward:g}); "
            f"final answer: <code>{_esc(trajectory.final_answer)}</code>"
            + (f"; ended: <code>{_esc(trajectory.error)}</code>" if trajectory.error else "") + "</div>"
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
                     f"<div class='wk-role'>{_esc(label)}</div><pre>{_esc(message.content)}</pre></div>")
    for index in range(turn_index, len(trajectory.turns)):  # turns whose reply was never appended
        parts.append(_turn_html(trajectory.turns[index], index, trained[index], tokenizer))
    parts.append("</div>")
    return "".join(parts)


def _turn_html(turn: Any, index: int, trained: bool, tokenizer: Any) -> str:
    meta = f"assistant · turn {index + 1} · {len(turn.completion_ids)} tokens · finish: {turn.finish_reason}"
    out = [f"<div class='wk-msg'><div class='wk-role'>{_esc(meta)}</div>",
           _completion_html(turn, trained, tokenizer)]
    if turn.parse_error:
        out.append(f"<div style='color:#B22222'>format error: {_esc(turn.parse_error)}</div>")
    for call in turn.tool_calls:
        out.append(f"<div>🔧 <b>{_esc(call.name)}</b>(<code>{_esc(call.arguments)}</code>)</div>")
    for result in turn.tool_results:  # what the model saw of it follows as a tool_result message
        status = "ok" if result.ok else f"error: {result.error}"
        out.append(f"<details><summary>tool result · {_esc(result.name)} · {_esc(status)}</summary>"
                   f"<pre>{_esc(result.output)}</pre></details>")
    out.append("</div>")
    return "".join(out)


def diff_html(parent_source: str, child_source: str, parent_label: str = "parent", child_label: str = "candidate",
              context: int | None = 3) -> str:
    """A side-by-side HTML diff of two harness sources (changed lines in context)."""
    table = difflib.HtmlDiff(wrapcolumn=70).make_table(parent_source.splitlines(), child_source.splitlines(),
                                                       _esc(parent_label), _esc(child_label),
                                                       context=context is not None, numlines=context or 0)
    return _STYLE + f"<div class='wk-trace'>{table}</div>"


def candidate_diff_html(archive: Any, candidate_id: str, parent_id: str | None = None) -> str:
    """A candidate of an archive against its parent (default: its first parent; the seed
    h0 when it has none)."""
    entry = archive.entry(candidate_id)
    parent = parent_id or (entry.parent_ids[0] if entry.parent_ids else archive.seed_id())
    head = (f"<div class='wk-trace'><b>{_esc(candidate_id)}</b> ← {_esc(parent)} · {_esc(entry.proposer)} · "
            f"status {_esc(entry.status)}<br>hypothesis: {_esc(entry.hypothesis)}<br>"
            f"change: {_esc(entry.change_summary)}</div>")
    return head + diff_html(archive.source(parent), archive.source(candidate_id), parent, candidate_id)


def _display(html_text: str) -> None:
    from IPython.display import HTML, display

    display(HTML(html_text))


def show_trajectory(trajectory: Trajectory, accepted: bool | None = None, tokenizer: Any = None,
                    max_seq_len: int = 1024) -> None:
    """Render one trajectory inline (static HTML: works under papermill and in exports)."""
    _display(trajectory_html(trajectory, accepted, tokenizer, max_seq_len))


def show_diff(archive: Any, candidate_id: str, parent_id: str | None = None) -> None:
    _display(candidate_diff_html(archive, candidate_id, parent_id))


# -- the browser: runs → candidates → examples → trajectory ------------------------------
def run_sources(run_root: str | Path) -> dict[str, list[Trajectory]]:
    """Everything a run kept that can be browsed: each test evaluation ('test eval-000')
    and each archive candidate's search-split evaluation ('<id> @ w<version>')."""
    from whalekit.archive import Archive, archive_folders
    from whalekit.runs import RunDir

    run = RunDir(run_root)
    sources: dict[str, list[Trajectory]] = {}
    for path in sorted((run.root / "test").glob("eval-*.jsonl")):
        sources[f"test {path.stem}"] = run.trajectories(path.stem)
    for folder in archive_folders(run.root / "archive"):  # one archive, or one per harness phase
        archive = Archive.open(folder, run.config()["domain"])
        for entry in archive.entries():
            for version in sorted(entry.scores):
                sources[f"{entry.id} @ w{version}"] = archive.trajectories(entry.id, version)
    return sources


def widgets_available() -> bool:
    """True when ipywidgets imports and a Jupyter kernel runs us, unless the run is
    headless: a kernel cannot see whether a front end is attached, so headless drivers
    (`whalekit.reproduce`, the notebook tests) set WHALEKIT_HEADLESS=1 for the kernels
    they start."""
    import os

    if os.environ.get(HEADLESS_ENV, "") not in ("", "0"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def browse(runs_root: str | Path, preset: str = "cpu", interactive: bool | None = None,
           static_examples: int = 2) -> Any:
    """The trace viewer. Interactive (ipywidgets): pick a run, a candidate or test
    evaluation, an example; see the trajectory and the candidate's diff against its
    parent. Static (no widgets, or `interactive=False`): the first run's accepted
    harness diff and its first `static_examples` test trajectories as HTML."""
    runs = sorted(p.parent for p in (Path(runs_root) / Path(preset).stem).glob("*/*/config.json"))
    if not runs:
        raise ValueError(f"no runs under {Path(runs_root) / Path(preset).stem}")
    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        whale = [r for r in runs if r.name.startswith("whale-")]
        return _static_view((whale or runs)[0], static_examples)
    return _widget_view(runs, Path(runs_root) / Path(preset).stem)


def _accepted_diff(run_root: Path) -> str:
    from whalekit.archive import archive_holding
    from whalekit.runs import RunDir

    domain = RunDir(run_root).config()["domain"]
    latest = archive_holding(run_root / "archive", domain)
    if latest is None:
        return ""
    ends = RunDir(run_root).events("run_end")
    accepted = ends[-1]["accepted_id"] if ends else latest.accepted()
    archive = archive_holding(run_root / "archive", domain, accepted, proposed=True)
    # Against the seed of the archive that proposed it: h0, or the phase's incoming harness.
    return "" if archive is None else candidate_diff_html(archive, accepted, archive.seed_id())


def _static_view(run_root: Path, examples: int) -> None:
    sources = run_sources(run_root)
    parts = [f"<h4>{_esc(run_root)}</h4>", _accepted_diff(run_root) or "<div>accepted harness: h0 (unchanged)</div>"]
    tests = [name for name in sources if name.startswith("test ")]
    if tests:
        last = tests[-1]
        for i, trajectory in enumerate(sources[last][:examples]):
            parts.append(trajectory_html(trajectory, title=f"{last} · example {i + 1}"))
    _display("".join(parts))


def _widget_view(runs: list[Path], base: Path) -> Any:
    import ipywidgets as w
    from IPython.display import HTML, display

    run_box = w.Dropdown(options=[(str(r.relative_to(base)), r) for r in runs], description="run")
    source_box = w.Dropdown(description="candidate")
    example_box = w.Dropdown(description="example")
    trace_out, diff_out = w.Output(), w.Output()
    cache: dict[str, Any] = {}

    def on_run(_: Any = None) -> None:
        cache["sources"] = run_sources(run_box.value)
        source_box.options = list(cache["sources"])

    def on_source(_: Any = None) -> None:
        trajectories = cache["sources"].get(source_box.value, [])
        example_box.options = [(f"{i + 1}: {t.task_id} #{t.sample_index} ({'✓' if t.correct else '✗'})", i)
                               for i, t in enumerate(trajectories)]
        diff_out.clear_output()
        with diff_out:
            display(HTML(_source_diff(run_box.value, source_box.value)))

    def on_example(_: Any = None) -> None:
        trace_out.clear_output()
        trajectories = cache["sources"].get(source_box.value, [])
        if example_box.value is not None and trajectories:
            with trace_out:
                display(HTML(trajectory_html(trajectories[example_box.value])))

    run_box.observe(on_run, "value")
    source_box.observe(on_source, "value")
    example_box.observe(on_example, "value")
    on_run()
    tabs = w.Tab(children=[trace_out, diff_out])
    tabs.set_title(0, "trajectory")
    tabs.set_title(1, "harness diff vs parent")
    return w.VBox([w.HBox([run_box, source_box, example_box]), tabs])


def _source_diff(run_root: Path, source: str | None) -> str:
    """The diff for the browser's candidate pick: a candidate against its parent, a test
    evaluation's harness against h0."""
    from whalekit.archive import archive_holding
    from whalekit.runs import RunDir

    domain = RunDir(run_root).config()["domain"]
    if not source or archive_holding(run_root / "archive", domain) is None:
        return ""
    if source.startswith("test "):
        index = int(source.split("-")[-1])
        evals = [e for e in RunDir(run_root).events("test_eval") if e["index"] == index]
        candidate = evals[-1]["accepted_id"] if evals else None
    else:
        candidate = source.split(" @ ")[0]
    archive = archive_holding(run_root / "archive", domain, candidate, proposed=True) if candidate else None
    if archive is None:  # never proposed: h0 itself
        return "<div>h0, the domain's initial harness (no parent)</div>"
    assert candidate is not None  # an archive was found for it
    return candidate_diff_html(archive, candidate)
