"""Pure helpers that harness code may import (standard library only): display, never
judgement. They exist so harnesses need no third-party package inside their worker.

    from whalekit.harness_helpers.chess_display import ascii_board
"""
