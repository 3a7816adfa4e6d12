#!lua
--! include args
-- batch_join: a queue (before its first job of the batch is enqueued there) or a
-- child batch joins an open batch: the batch's end then waits for its share.
--
-- KEYS[1] batch      hash   the batch (batch_open.lua)
--
-- ARGV[1] member     'q:<queue>' or 'k:<child batch id>'
-- ARGV[2] ttl_ms     the open batch lives this long from now
--
-- Returns the batch's state: 'open' (joined: the member is in), 'closed', 'cancelled'
-- or 'ended' (refused: nothing joins it now), '' (no such batch: never opened, or
-- expired).

local ttl = arg_int('batch_join', 2, 'ttl_ms', 1)
local member = ARGV[1] or ''
if not (string.find(member, '^q:.') or string.find(member, '^k:.')) then
    error("batch_join: member (ARGV[1]) must be 'q:<queue>' or 'k:<batch>', not " .. member)
end
local st = redis.call('HGET', KEYS[1], 'st')
if st == 'closed' and redis.call('HEXISTS', KEYS[1], 'cx') == 1 then
    return 'cancelled'
elseif st ~= 'open' then
    return st or ''
end
redis.call('HSETNX', KEYS[1], member, '')
redis.call('PEXPIRE', KEYS[1], ttl)
return 'open'
