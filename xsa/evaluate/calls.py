"""
The harness's side of a served sandbox run: the tests run here, in the harness's own process, and
call the program's function across two pipes.

Why: a pass that the program itself announces can be forged. The harness used to append
`print(token)` after the tests and count a pass when the token came out: a program that found the
token in its own code object and printed it, or printed it from sys.excepthook after a failed
assert, passed without passing a test. Here the tests never enter the program's process: the
program only answers calls (arguments in, a value out, both as Python literals), and the verdict is
whether the tests, run by the harness on those values, finish without an error. Whatever the
program prints, wherever it writes, it can only give values; a value is judged by the tests.

A reply is read back by `literal`, which builds plain values (numbers, strings, bytes, tuples,
lists, dicts, sets, None, booleans, inf and nan) and nothing else, so no object of the program's
making reaches the harness. Its work is bounded before anything is built: a reply of at most
REPLY_LIMIT bytes, MAX_NODES syntax nodes, MAX_DEPTH levels of nesting, and MAX_HASHED elements in
its sets and dicts together (a large set of numbers that all hash alike costs quadratic time to build: it held
the harness minutes past its time limit).
"""

from __future__ import annotations

import ast
import math
import os
import threading

REPLY_LIMIT = 1 << 20  # bytes of one reply
MAX_NODES = 200_000  # syntax nodes of one reply
MAX_DEPTH = 100  # nesting of containers in one reply
MAX_HASHED = 4096  # elements of all sets and dicts of one reply: bounds the cost of elements that hash alike


class ProgramGone(RuntimeError):
    """The program ended, or was killed, before it answered a call."""


class CallFailed(RuntimeError):
    """The program's function raised; the message is what it raised."""


def literal(text: str):
    """A reply's value: Python literal syntax, plus inf, nan and set(); anything else is refused, and
    so is a reply past the bounds (MAX_NODES, MAX_DEPTH, MAX_HASHED) before any value is built."""
    if len(text) > REPLY_LIMIT:
        raise ValueError(f"a reply of more than {REPLY_LIMIT} characters")
    tree = ast.parse(text, mode="eval")
    hashed = 0
    for n, node in enumerate(ast.walk(tree)):
        if n >= MAX_NODES:
            raise ValueError(f"a reply of more than {MAX_NODES} values")
        hashed += len(node.elts) if isinstance(node, ast.Set) else len(node.keys) if isinstance(node, ast.Dict) else 0
        if hashed > MAX_HASHED:
            raise ValueError(f"a reply with more than {MAX_HASHED} elements of sets and dicts")

    def value(node, depth=0):
        if depth > MAX_DEPTH:
            raise ValueError(f"a reply nested more than {MAX_DEPTH} deep")
        if isinstance(node, ast.Constant) and not isinstance(node.value, type(...)):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [value(e, depth + 1) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items if isinstance(node, ast.List) else set(items)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {value(k, depth + 1): value(v, depth + 1) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            x = value(node.operand, depth + 1)
            if isinstance(x, (int, float, complex)) and not isinstance(x, bool):
                return -x if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):  # complex: 1+2j
            a, b = value(node.left, depth + 1), value(node.right, depth + 1)
            if isinstance(b, complex) and isinstance(a, (int, float)):
                return a + b if isinstance(node.op, ast.Add) else a - b
        if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
            return math.inf if node.id == "inf" else math.nan
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and not node.keywords:
            if node.func.id in ("set", "frozenset"):
                return set() if node.func.id == "set" else frozenset()
        raise ValueError(f"not a plain value: {ast.dump(node)[:80]}")
    return value(tree.body)


class Channel:
    """Two pipes: calls to the program, replies from it. The program's ends go to the launcher
    (pass_fds); after the start the harness keeps only its own."""

    def __init__(self):
        self._req_r, req_w = os.pipe()
        rep_r, self._rep_w = os.pipe()
        self.requests = os.fdopen(req_w, "w", encoding="utf-8")
        self.replies = os.fdopen(rep_r, "rb")

    def program_fds(self) -> tuple[int, int]:
        return self._req_r, self._rep_w

    def started(self) -> None:
        """Close the program's ends here: once the program is gone, a read ends instead of waiting."""
        os.close(self._req_r)
        os.close(self._rep_w)

    def call(self, *args):
        try:
            self.requests.write(repr(args) + "\n")
            self.requests.flush()
        except (BrokenPipeError, ValueError):
            raise ProgramGone("the program ended before its tests finished") from None
        line = self.replies.readline(REPLY_LIMIT + 1)
        if not line.endswith(b"\n"):
            raise ProgramGone("the program ended before its tests finished" if len(line) <= REPLY_LIMIT
                              else f"a reply of more than {REPLY_LIMIT} bytes")
        try:
            kind, value = literal(line.decode("utf-8"))
        except (ValueError, SyntaxError, TypeError, UnicodeDecodeError, RecursionError, MemoryError):
            raise CallFailed("the function returned something that is not a plain value") from None
        if kind == "error":
            raise CallFailed(str(value))
        if kind != "ok":
            raise CallFailed("a malformed reply")
        return value

    def close(self) -> None:
        for f in (self.requests, self.replies):
            try:
                f.close()
            except OSError:
                pass


class Client(threading.Thread):
    """The tests, run beside the wall clock: client(call) -> `error` (None when they passed)."""

    def __init__(self, client, channel: Channel):
        super().__init__(daemon=True)
        self.client, self.channel = client, channel
        self.error: BaseException | None = None
        self.finished = False

    def run(self):
        try:
            self.client(self.channel.call)
        except BaseException as e:  # an assert of the tests, a failed call, the program gone
            self.error = e
        finally:
            self.finished = True
            try:
                self.channel.requests.close()  # the program's loop ends: it exits
            except OSError:
                pass

    def status(self) -> str:
        e = self.error
        return (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)[:200]
