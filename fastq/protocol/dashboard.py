"""The dashboard's sessions in Redis (:mod:`fastq.serve.pages.session` makes and
checks their cookies): the namespace's session epoch, which every cookie's MAC
covers, so that adding one to it ends every session of every server at once; and
the sessions logged out, each kept until it would have expired anyway.
"""

from __future__ import annotations

import redis

from fastq.connection.typed import sync_reply
from fastq.protocol.keys import NamespaceKeys


def session_state(client: redis.Redis, keys: NamespaceKeys, nonce: str) -> tuple[int, bool]:
    """The epoch, and whether session ``nonce`` was logged out ("" for none)."""
    if not nonce:
        return int(sync_reply(client.get(keys.session_epoch)) or 0), False
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.session_epoch)
    pipe.exists(keys.revoked_session(nonce))
    epoch, revoked = pipe.execute()
    return int(epoch or 0), bool(revoked)


def revoke_session(client: redis.Redis, keys: NamespaceKeys, nonce: str, for_s: int) -> None:
    """End session ``nonce`` (logged out): kept ``for_s`` seconds, its time left."""
    client.set(keys.revoked_session(nonce), 1, ex=max(1, for_s))


def revoke_all_sessions(client: redis.Redis, keys: NamespaceKeys) -> int:
    """End every session of the namespace (a new epoch): the new epoch."""
    return int(sync_reply(client.incr(keys.session_epoch)))
