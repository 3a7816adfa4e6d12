#!lua flags=allow-oom
--! include args
-- group_pause: pause or resume one group of a queue: the claim passes over a paused
-- group (lib/groups.lua), which keeps its jobs and its place in the ring.
--
-- KEYS[1] settings  hash  its field 'paused_groups': the paused groups' names,
--                         joined by '\n' (a group's name never holds one)
-- KEYS[2] wake      list  the token that wakes the queue's idle workers (a resume)
--
-- ARGV[1] mode   'pause' or 'resume'
-- ARGV[2] group  the group's name (1 to 100 printable characters)
--
-- Returns 1 if it changed the group's state, 0 if the group was so already.
--
-- allow-oom: an operator's switch must work on a full Redis.

local mode = ARGV[1]
if mode ~= 'pause' and mode ~= 'resume' then
    error('group_pause: mode (ARGV[1]) must be pause or resume, not ' .. tostring(mode))
end
local group = ARGV[2]
if type(group) ~= 'string' or #group < 1 or #group > 400 or string.find(group, '%c') then
    error('group_pause: group (ARGV[2]) must be 1 to 100 printable characters')
end
local names, found = {}, false
for name in string.gmatch(redis.call('HGET', KEYS[1], 'paused_groups') or '', '[^\n]+') do
    if name == group then
        found = true
    else
        names[#names + 1] = name
    end
end
if mode == 'pause' then
    if found then
        return 0
    end
    names[#names + 1] = group
elseif not found then
    return 0
end
if #names > 0 then
    redis.call('HSET', KEYS[1], 'paused_groups', table.concat(names, '\n'))
else
    redis.call('HDEL', KEYS[1], 'paused_groups')
end
if mode == 'resume' then
    redis.call('RPUSH', KEYS[2], 1)
    redis.call('LTRIM', KEYS[2], 0, 0)
end
return 1
