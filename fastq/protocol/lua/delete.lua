#!lua flags=allow-oom
-- delete: remove one dead or broken job for good (the dashboard's delete, `fastq dead
-- purge --id`, `fastq broken purge --id`). Its record, if any, stays: the id stays
-- idempotent while the record lasts.
--
-- KEYS[1] jobs    hash   id -> envelope
-- KEYS[2] dead    zset   id -> time of death (ms)
-- KEYS[3] broken  hash   id -> why it could not run
-- KEYS[4] poison  hash   dead id -> why it died when no worker could say
-- KEYS[5] stalls  hash   id -> times its worker died running it
-- KEYS[6] stats   hash   counters: 'purged'
--
-- ARGV[1] job_id    the job
--
-- Returns 1 when the job was dead or broken and is gone; 0 when it is neither (it
-- waits, runs, ended otherwise, or is gone): nothing is changed then.
-- allow-oom: it only frees memory.

local id = ARGV[1]
if #ARGV ~= 1 or not id or id == '' then
    error('delete: ARGV must be one job id, not ' .. #ARGV .. ' arguments')
end
if not redis.call('ZSCORE', KEYS[2], id) and redis.call('HEXISTS', KEYS[3], id) == 0 then
    return 0
end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
redis.call('HINCRBY', KEYS[6], 'purged', 1)
return 1
