-- History: a queue's jobs done and failed by 10-second slot, for the charts of the
-- dashboard (fastq/protocol/history.py reads it), written by the script that
-- settles the jobs, in the same call: no sampler, and every process sees the same.
--
-- history  hash  a ring of HISTORY_SLOTS slots (two hours): field the slot's index,
--                (slot_ms / HISTORY_SLOT_MS) % HISTORY_SLOTS; value
--                '<slot_ms>:<processed>:<failed>', slot_ms the slot's start on
--                Redis' clock. A value of another slot_ms is a lap of the ring ago:
--                the first count of the new slot replaces it.
-- One HGET and one HSET a batch, nothing a job.

local HISTORY_SLOT_MS = 10000
local HISTORY_SLOTS = 720

local function count_history(key, now, processed, failed)
    if processed == 0 and failed == 0 then
        return
    end
    local slot = now - now % HISTORY_SLOT_MS
    local field = string.format('%d', (slot / HISTORY_SLOT_MS) % HISTORY_SLOTS)
    local p, f = processed, failed
    local value = redis.call('HGET', key, field)
    if value then
        local at, vp, vf = string.match(value, '^(%d+):(%d+):(%d+)$')
        if tonumber(at) == slot then
            p, f = p + tonumber(vp), f + tonumber(vf)
        end
    end
    redis.call('HSET', key, field, string.format('%d:%d:%d', slot, p, f))
end
