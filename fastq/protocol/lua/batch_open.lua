#!lua
--! include args
-- batch_open: create a batch (fastq/protocol/batches.py), or find it open.
--
-- KEYS[1] batch      hash   the batch: st (open, closed, ended), t0 (opened, ms), d
--                           (description), cb (its callbacks, JSON), parent, tc
--                           (closed), cx (cancelled), te (ended), fired; and one field
--                           per member: 'q:<queue>' -> that queue's share as last
--                           told (lib/batches.lua), 'k:<batch>' -> a child batch's
--                           final counts ('' until it ended)
--
-- ARGV[1] ttl_ms       an open batch is deleted this long after it was last opened
--                      or joined (a batch never closed does not live forever)
-- ARGV[2] description  shown with its status
-- ARGV[3] callbacks    JSON: {"complete": callback, "success": callback}, or ''
-- ARGV[4] parent       the id of the batch that holds this one, or ''
--
-- Returns {created, state}: created 1 when this call made it; state 'open', or
-- 'closed' / 'cancelled' / 'ended' for a batch of this id that exists and is not open.

local ttl = arg_int('batch_open', 1, 'ttl_ms', 1)
local st = redis.call('HGET', KEYS[1], 'st')
if st then
    if st == 'open' then
        redis.call('PEXPIRE', KEYS[1], ttl)
    elseif st == 'closed' and redis.call('HEXISTS', KEYS[1], 'cx') == 1 then
        st = 'cancelled'
    end
    return {0, st}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'st', 'open', 't0', now, 'd', ARGV[2] or '', 'cb', ARGV[3] or '',
    'parent', ARGV[4] or '')
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, 'open'}
