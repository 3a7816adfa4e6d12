-- arg_int: ARGV[i] as an integer, at least `min` when given; otherwise error()
-- naming the script and the argument. Scripts read every ARGV through it before
-- their first write, so a refused call writes nothing.
local function arg_int(script, i, name, min)
    local v = tonumber(ARGV[i])
    if not v or v ~= math.floor(v) or v ~= v or v == math.huge or v == -math.huge
            or (min and v < min) then
        error(script .. ': ' .. name .. ' (ARGV[' .. i .. ']) must be an integer'
            .. (min and (' >= ' .. min) or '') .. ', not ' .. tostring(ARGV[i]))
    end
    return v
end

-- arg_worker: ARGV[i] as a worker id (a non-empty string), or error().
local function arg_worker(script, i)
    local w = ARGV[i]
    if not w or w == '' then
        error(script .. ': worker_id (ARGV[' .. i .. ']) must not be empty')
    end
    return w
end
