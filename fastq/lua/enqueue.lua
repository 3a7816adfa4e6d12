#!lua
-- enqueue: add a batch of jobs to one queue.
--
-- KEYS[1] jobs       hash   id -> envelope
-- KEYS[2] ready      list   ids; producers LPUSH, workers pop the right end (the front)
-- KEYS[3] prio       zset   ids with a non-zero priority; score = -priority * 2^31 + seq
-- KEYS[4] scheduled  zset   id -> due time (ms)
-- KEYS[5] stats      hash   counters (enqueued, seq, ...)
-- KEYS[6] wake       list   at most one token; idle workers BLPOP it
--
-- ARGV[1] priority   integer shared by the batch (0 = plain FIFO)
-- ARGV[2] delay_ms   0 = ready now, > 0 = scheduled that far after Redis' clock
-- ARGV[3..] pairs    id, envelope
--
-- An id that already exists is left alone (custom ids make enqueue idempotent).
-- Returns the number of jobs added.
-- No allow-oom flag: over maxmemory Redis refuses the whole call before it runs.

-- Input checked before the first write, so a refused call writes nothing: the limits
-- of fastq/limits.py, so that a non-Python producer cannot write what a worker
-- cannot serve.
local function refuse(message)
    error(redis.error_reply('ERR fastq enqueue: ' .. message))
end
if #ARGV < 2 or #ARGV % 2 ~= 0 then
    refuse('ARGV must be priority, delay_ms, then id/envelope pairs; got ' .. #ARGV .. ' values')
end
local priority = tonumber(ARGV[1])
local delay_ms = tonumber(ARGV[2])
if priority == nil or priority ~= math.floor(priority) or math.abs(priority) > 1048576 then
    refuse('priority must be an integer within +-2^20, not ' .. ARGV[1])
end
if delay_ms == nil or delay_ms ~= delay_ms or delay_ms < 0 or delay_ms > 315360000000 then
    refuse('delay_ms must be a number within [0, 315360000000] (ten years), not ' .. ARGV[2])
end
-- What would break the queue is refused here: an id too long for a pool's heartbeat
-- slot, or one in the reserved namespace (the held sets' sentinel lives there). The
-- character set (printable ASCII) is the producers' to check: a pattern match per id
-- here cost ~0.5 us a job, an eighth of the whole call.
for i = 3, #ARGV, 2 do
    local id = ARGV[i]
    local len = #id
    if len < 1 or len > 200 then
        refuse('job id #' .. (i - 1) / 2 .. ' must be 1 to 200 bytes')
    end
    -- 102 is 'f': only then is the prefix worth a substring
    if string.byte(id, 1) == 102 and string.sub(id, 1, 6) == 'fastq:' then
        refuse('job id #' .. (i - 1) / 2 .. " starts with the reserved prefix 'fastq:'")
    end
end

local added = {}
for i = 3, #ARGV, 2 do
    if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
        added[#added + 1] = ARGV[i]
    end
end
local n = #added
if n == 0 then
    return 0
end

if delay_ms > 0 then
    local t = redis.call('TIME')
    local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + delay_ms
    local args = {}
    for k = 1, n do
        args[#args + 1] = due
        args[#args + 1] = added[k]
    end
    redis.call('ZADD', KEYS[4], unpack(args))
elseif priority ~= 0 then
    -- seq keeps FIFO order within one priority
    local last = redis.call('HINCRBY', KEYS[5], 'seq', n)
    local base = -priority * 2147483648 + (last - n)
    local args = {}
    for k = 1, n do
        args[#args + 1] = base + k
        args[#args + 1] = added[k]
    end
    redis.call('ZADD', KEYS[3], unpack(args))
else
    redis.call('LPUSH', KEYS[2], unpack(added))
end

redis.call('HINCRBY', KEYS[5], 'enqueued', n)
if delay_ms == 0 and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], 1)
end
return n
