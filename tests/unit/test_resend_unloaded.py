"""The one NOSCRIPT resend (``fastq.protocol.scripts.resend_unloaded``) that a script
call, a pipeline of calls, a worker's round trip and a durable enqueue share (no
Redis: the sends are stand-ins)."""

from __future__ import annotations

from typing import Any

from redis.exceptions import MovedError, NoScriptError, ResponseError

from fastq.protocol import scripts


def commands(n: int) -> list[scripts.Command]:
    return [(scripts.PLAIN, (), ("GET", f"k{i}")) for i in range(n)]


class Server:
    """Answers each command it is sent from a script of replies, in turn."""

    def __init__(self, *answers: list[Any]) -> None:
        self.answers = list(answers)
        self.sent: list[list[str]] = []
        self.reloads: list[list[int]] = []

    def send(self, again: list[scripts.Command]) -> list[Any]:
        self.sent.append([c[2][1] for c in again])
        return self.answers.pop(0)

    def reload(self, missing: list[int]) -> None:
        self.reloads.append(missing)


def test_only_the_calls_answered_noscript_are_sent_again_after_one_reload() -> None:
    cmds = commands(4)
    failure = ResponseError("WRONGTYPE")
    replies: list[Any] = [1, NoScriptError("NOSCRIPT"), failure, NoScriptError("NOSCRIPT")]
    server = Server([21, 23])
    assert scripts.resend_unloaded(cmds, replies, server.send, server.reload) == [
        1,
        21,
        failure,
        23,
    ]
    assert server.reloads == [[1, 3]] and server.sent == [["k1", "k3"]]


def test_nothing_is_sent_again_when_every_call_ran() -> None:
    server = Server()
    assert scripts.resend_unloaded(commands(2), [1, 2], server.send, server.reload) == [1, 2]
    assert server.sent == server.reloads == []


def test_a_resend_answered_noscript_again_stands_after_one_round() -> None:
    server = Server([NoScriptError("NOSCRIPT")])
    replies = scripts.resend_unloaded(
        commands(1), [NoScriptError("NOSCRIPT")], server.send, server.reload
    )
    assert isinstance(replies[0], NoScriptError) and len(server.sent) == 1


def test_a_caller_may_resend_more_than_noscript_for_more_rounds() -> None:
    # a durable enqueue: a MOVED did not run either; its resend meets a NOSCRIPT on
    # the new master, sent once more
    cmds = commands(3)
    moved = MovedError("3999 127.0.0.1:6381")
    server = Server([NoScriptError("NOSCRIPT")], [7])
    replies = scripts.resend_unloaded(
        cmds,
        [5, moved, 6],
        server.send,
        server.reload,
        not_run=(NoScriptError, MovedError),
        rounds=2,
    )
    assert replies == [5, 7, 6]
    assert server.sent == [["k1"], ["k1"]] and server.reloads == [[1], [1]]
