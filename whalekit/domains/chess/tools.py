"""The chess toolbox: ways to *show* a position, never to solve it.

A harness decides what the model sees; these tools give it the raw material: the board
as FEN, an ASCII or Unicode diagram, piece lists, legal moves (SAN or UCI, sorted,
grouped by piece or by kind), a legality check and "play this move and show me the
result". There is no engine and no evaluation: the model must still choose the move.
Every tool works on the task's position, optionally after `moves` (a list of moves in
any notation) played from it, and reports bad input as a failed ToolResult.

    box = chess_toolbox()
    box.run(ToolCall("legal_moves", {"notation": "san", "group": "kind"}), task.view())
"""

from __future__ import annotations

from typing import Any

import chess

from whalekit.domains.base import Toolbox
from whalekit.domains.chess.notation import parse_move, side_name
from whalekit.types import TaskView, ToolResult

TOOLS_DESCRIPTION = """\
Chess tools (call as ToolCall(name, {arguments})); each works on the task's position, or on the position after
`moves` (a list of moves, SAN or UCI) are played from it. No tool evaluates positions: the model chooses the move.
- board(format="ascii"|"unicode"|"fen"|"pieces"|"all", moves=[]) -> the position: an 8x8 diagram (ranks 8..1,
  files a..h, uppercase = white, '.' = empty), the FEN, or piece lists per side ("White: Kg1, Qd1, ...").
- legal_moves(notation="san"|"uci", group="none"|"piece"|"kind", moves=[]) -> the legal moves, sorted. SAN marks
  checks with '+' and checkmates with '#'. group="piece" puts each piece's moves on one line; group="kind" lists
  checkmates, then checks, then captures, then the other moves.
- check_move(move, moves=[]) -> whether `move` (any notation, any case) is legal, with its SAN and UCI.
- play(move, moves=[]) -> the position after `move`: diagram, FEN, and whether it is check, checkmate or stalemate.
Task inputs: fen, side_to_move ("white"/"black"), moves_to_find (solver moves in the line), mate_in (or None),
last_move (the opponent's move that led to the position, SAN, or None)."""

PIECE_ORDER = (chess.KING, chess.QUEEN, chess.ROOK, chess.BISHOP, chess.KNIGHT, chess.PAWN)


def board_after(task: TaskView, moves: Any = None) -> chess.Board:
    """The task's position after `moves` (list or space-separated string); ValueError if any is bad."""
    board = chess.Board(task.inputs["fen"])
    if isinstance(moves, str):
        moves = moves.split()
    for text in moves or []:
        board.push(parse_move(board, str(text)))
    return board


def ascii_diagram(board: chess.Board) -> str:
    rows = [f"{8 - i} {line}" for i, line in enumerate(str(board).splitlines())]
    return "\n".join(rows + ["  a b c d e f g h"])


def piece_lists(board: chess.Board) -> str:
    lines = []
    for color in (chess.WHITE, chess.BLACK):
        names = []
        for piece_type in PIECE_ORDER:
            for square in board.pieces(piece_type, color):
                letter = "" if piece_type == chess.PAWN else chess.piece_symbol(piece_type).upper()
                names.append(letter + chess.square_name(square))
        lines.append(f"{'White' if color else 'Black'}: {', '.join(names)}")
    return "\n".join(lines)


def legal_move_list(board: chess.Board, notation: str = "san", group: str = "none") -> str:
    if notation not in ("san", "uci"):
        raise ValueError(f"notation must be 'san' or 'uci', got {notation!r}")

    def name(move: chess.Move) -> str:
        return board.san(move) if notation == "san" else move.uci()

    moves = sorted(board.legal_moves, key=name)
    if group == "none":
        return " ".join(name(m) for m in moves)
    if group == "piece":
        by_square: dict[int, list[str]] = {}
        for move in moves:
            by_square.setdefault(move.from_square, []).append(name(move))
        lines = []
        for square, names in sorted(by_square.items(), key=lambda kv: (PIECE_ORDER.index(
                board.piece_type_at(kv[0])), kv[0])):  # type: ignore[arg-type]
            piece = board.piece_at(square)
            assert piece is not None
            lines.append(f"{chess.piece_name(piece.piece_type).capitalize()} {chess.square_name(square)}: "
                         + " ".join(names))
        return "\n".join(lines)
    if group == "kind":
        kinds: dict[str, list[str]] = {"Checkmates": [], "Checks": [], "Captures": [], "Other moves": []}
        for move in moves:
            san = board.san(move)
            kind = ("Checkmates" if san.endswith("#") else "Checks" if san.endswith("+")
                    else "Captures" if board.is_capture(move) else "Other moves")
            kinds[kind].append(name(move))
        return "\n".join(f"{kind}: {' '.join(names)}" for kind, names in kinds.items() if names)
    raise ValueError(f"group must be 'none', 'piece' or 'kind', got {group!r}")


def render(board: chess.Board, fmt: str = "ascii") -> str:
    if fmt == "fen":
        return board.fen()
    if fmt == "ascii":
        return ascii_diagram(board)
    if fmt == "unicode":
        return board.unicode(empty_square=".")
    if fmt == "pieces":
        return piece_lists(board)
    if fmt == "all":
        side = side_name(board).capitalize()
        return f"FEN: {board.fen()}\n{ascii_diagram(board)}\n{piece_lists(board)}\n{side} to move."
    raise ValueError(f"format must be one of ascii, unicode, fen, pieces, all; got {fmt!r}")


def _status(board: chess.Board) -> str:
    if board.is_checkmate():
        return "checkmate"
    if board.is_stalemate():
        return "stalemate"
    return "check" if board.is_check() else "no check"


def _failed(name: str, exc: Exception) -> ToolResult:
    return ToolResult(name, f"Error: {exc}", ok=False, error="bad_arguments")


def tool_board(task: TaskView, args: dict[str, Any]) -> ToolResult:
    try:
        board = board_after(task, args.get("moves"))
        return ToolResult("board", render(board, str(args.get("format", "ascii"))))
    except ValueError as exc:
        return _failed("board", exc)


def tool_legal_moves(task: TaskView, args: dict[str, Any]) -> ToolResult:
    try:
        board = board_after(task, args.get("moves"))
        text = legal_move_list(board, str(args.get("notation", "san")), str(args.get("group", "none")))
        return ToolResult("legal_moves", text, meta={"count": board.legal_moves.count()})
    except ValueError as exc:
        return _failed("legal_moves", exc)


def tool_check_move(task: TaskView, args: dict[str, Any]) -> ToolResult:
    try:
        board = board_after(task, args.get("moves"))
    except ValueError as exc:
        return _failed("check_move", exc)
    text = str(args.get("move", ""))
    try:
        move = parse_move(board, text)
    except ValueError as exc:
        return ToolResult("check_move", f"Not legal: {exc}", meta={"legal": False})
    return ToolResult("check_move", f"Legal: {board.san(move)} (UCI {move.uci()})", meta={"legal": True})


def tool_play(task: TaskView, args: dict[str, Any]) -> ToolResult:
    try:
        board = board_after(task, args.get("moves"))
        move = parse_move(board, str(args.get("move", "")))
    except ValueError as exc:
        return _failed("play", exc)
    san = board.san(move)
    board.push(move)
    text = f"After {san}:\n{ascii_diagram(board)}\nFEN: {board.fen()}\nStatus: {_status(board)}."
    return ToolResult("play", text, meta={"status": _status(board)})


def chess_toolbox() -> Toolbox:
    return Toolbox({"board": tool_board, "legal_moves": tool_legal_moves, "check_move": tool_check_move,
                    "play": tool_play})
