#!lua flags=allow-oom
--! include many
--! include records
-- fold: fold the done records a queue's acks logged into records (lib/records.lua),
-- all of them, and read the records of some ids: what a read of one job, a listing
-- of recent ones or a look at their states does first, so it is exact whether or
-- not a reaper folded them yet.
--
-- KEYS[1] records     hash  id -> the record of a job that ended (lib/records.lua)
-- KEYS[2] records_old hash  the previous generation of records
--
-- ARGV[1..] ids            the ids whose records to return
--
-- Returns the record of each id (the current generation's, else the previous
-- one's; nil: none), in order.
-- allow-oom: folding a record grows memory (bounded by the record limits); a read
-- of a job must answer while Redis is over maxmemory.

fold_records(KEYS[1], nil)
fold_records(KEYS[2], nil)
if #ARGV == 0 then
    return {}
end
local new = call_many('HMGET', KEYS[1], ARGV)
local old = call_many('HMGET', KEYS[2], ARGV)
local out = {}
for i = 1, #ARGV do
    out[i] = new[i] or old[i]
end
return out
