-- Redis commands over lists of any length. Lua's unpack() takes about 8,000 values
-- at most ('too many results to unpack'), and a script stopped by that error keeps
-- every write it made before it: so a list given by the caller, or read from Redis
-- with no bound, goes to Redis in calls of at most MANY values (an even number: the
-- pairs of an HSET or a ZADD stay whole).
local MANY = 4000

-- call_many(command, key, values[, flag]): `command key [flag] values...` in calls
-- of at most MANY values; the replies of a read joined in order, the counts of a
-- write summed (of a push, its lengths: nobody reads them). `values` is not empty
-- (as for the command itself).
local function call_many(command, key, values, flag)
    local n = #values
    if n <= MANY then
        if flag then
            return redis.call(command, key, flag, unpack(values))
        end
        return redis.call(command, key, unpack(values))
    end
    local joined, sum, read = {}, 0, false
    for lo = 1, n, MANY do
        local hi = math.min(lo + MANY - 1, n)
        local reply
        if flag then
            reply = redis.call(command, key, flag, unpack(values, lo, hi))
        else
            reply = redis.call(command, key, unpack(values, lo, hi))
        end
        if type(reply) == 'table' then
            read = true
            for j = 1, #reply do
                joined[#joined + 1] = reply[j]
            end
        else
            sum = sum + reply
        end
    end
    if read then
        return joined
    end
    return sum
end

-- slice(list, lo, hi): a new list of list[lo..hi] (what {unpack(list, lo, hi)} is,
-- for any length)
local function slice(list, lo, hi)
    local out = {}
    for i = lo, hi do
        out[#out + 1] = list[i]
    end
    return out
end
