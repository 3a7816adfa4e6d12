--! include many
-- push_front: put ids back at the front of ready, the first id at the very front.
local function push_front(ready, ids)
    local back = {}
    for k = #ids, 1, -1 do
        back[#back + 1] = ids[k]
    end
    call_many('RPUSH', ready, back)
end
