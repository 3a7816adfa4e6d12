--! include many
-- Chains (fastq/protocol/chains.py): while a link of a chain lives, the rest of its
-- chain waits in its queue's chained hash; the script that ends the link done moves
-- it to the queue's chain_out in the same call (its forwarder enqueues the next link
-- from there, then deletes the entry), and any other end (dead, broken, cancelled,
-- purged) deletes it: the chain stops at that link.
--
-- chained    hash  job id -> the rest of its chain (JSON: only forwarders read it)
-- chain_out  hash  id of a link that ended done -> '<ms> <rest of its chain>': when
--                  it was moved (0: forward at once), a space, then the rest; a
--                  worker forwards the links its ack moved at once, a reaper those
--                  left over (after a grace, unless 0: their worker is gone)
--
-- k holds the key names (chained, chain_out) and, once looked up, `live`: whether
-- the queue has a chained job at all (one EXISTS a call for a queue that never had).

local function chains_live(k)
    if k.live == nil then
        k.live = redis.call('EXISTS', k.chained) == 1
    end
    return k.live
end

-- chain_done: the jobs `ids` ended done, at `stamp` (ms; 0: for a reaper to forward
-- at once). Returns the ids whose chain goes on (their rest now in chain_out): each
-- once, since the move deletes its chained entry.
local function chain_done(k, ids, stamp)
    if #ids == 0 or not chains_live(k) then
        return {}
    end
    local moved = {}
    local rests = call_many('HMGET', k.chained, ids)
    local entries = {}
    for i = 1, #ids do
        if rests[i] then
            moved[#moved + 1] = ids[i]
            entries[#entries + 1] = ids[i]
            entries[#entries + 1] = stamp .. ' ' .. rests[i]
        end
    end
    if #moved > 0 then
        call_many('HDEL', k.chained, moved)
        call_many('HSET', k.chain_out, entries)
    end
    return moved
end

-- chain_drop: the jobs `ids` ended otherwise than done: their chains stop there.
local function chain_drop(k, ids)
    if #ids == 0 or not chains_live(k) then
        return
    end
    call_many('HDEL', k.chained, ids)
end
