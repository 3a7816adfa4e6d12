#!lua flags=allow-oom
--! include many
--! include links
-- take: take at-most-once jobs out of the queue before they run.
--
-- KEYS[1] held       set    ids this worker holds leases on
-- KEYS[2] jobs       hash   id -> envelope
-- KEYS[3] stalls     hash   id -> times its worker died running it
-- KEYS[4] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[5] tagged     zset   '<tag>\n<id>' of every live tagged job
-- KEYS[6] unique     hash   unique key -> the id holding its lock
-- KEYS[7] unique_exp zset   unique key -> when its lock's window ends (ms)
--
-- ARGV[1..] ids   the ids to take (at least one)
--
-- Only ids this worker still holds are taken: each leaves the held set and its
-- envelope is deleted, so that nothing can hand it back or run it again (a
-- failure, a timeout, a dead or stopped worker, a lapsed lease). Returns the ids
-- taken; the worker runs those only. A job whose worker dies after this is lost:
-- the trade-off of at-most-once delivery. Nothing in Redis follows a taken job, so
-- its tags and its unique lock (unless mode 'window') end here, as it starts.
-- allow-oom: it only deletes.

if #ARGV == 0 then
    error('take: no ids given')
end
local held = call_many('SMISMEMBER', KEYS[1], ARGV)
local mine = {}
for k = 1, #ARGV do
    if held[k] == 1 then
        mine[#mine + 1] = ARGV[k]
    end
end
if #mine > 0 then
    call_many('SREM', KEYS[1], mine)
    call_many('HDEL', KEYS[2], mine)
    call_many('HDEL', KEYS[3], mine)
    end_links({links = KEYS[4], tagged = KEYS[5], unique = KEYS[6], unique_exp = KEYS[7]}, mine)
end
return mine
