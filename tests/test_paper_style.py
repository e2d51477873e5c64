"""The paper style leaves matplotlib's interactive setting as the figure left it, so a
figure cell re-run in the same kernel displays its figure again."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt

from whalekit.report import plot_style


def test_the_interactive_mode_a_backend_turns_on_while_drawing_survives_the_style():
    @plot_style.paper_style
    def draw():
        # what the inline backend does when the kernel's first figure resolves it
        matplotlib.interactive(True)
        assert plt.rcParams["font.size"] == plot_style.PAPER_STYLE["font.size"]
        return plt.figure()

    was = matplotlib.is_interactive()
    try:
        matplotlib.interactive(False)
        figure = draw()
        assert matplotlib.is_interactive(), "rc_context turned interactive mode off: a re-run shows no figure"
        assert plt.rcParams["font.size"] != plot_style.PAPER_STYLE["font.size"] or \
            matplotlib.rcParamsDefault["font.size"] == plot_style.PAPER_STYLE["font.size"]  # the style itself is undone
        plt.close(figure)
    finally:
        matplotlib.interactive(was)
