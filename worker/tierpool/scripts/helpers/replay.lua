-- helpers/replay.lua (after helpers/stream.lua): shared by REPLAY and REPLAY_GATED.
-- The dead letter ``id`` of the stream ``dlq`` as the envelope to add to ``tier``, with every optional field a task
-- carries (``out``), and its fields (``ft``); nil and the error reply when there is no such entry, it is not a
-- task envelope, or it was cut (``truncated``: an entry over the size limit).
local function replayed_envelope(dlq, id, tier)
  local entry = redis.call('XRANGE', dlq, id, id)
  if #entry == 0 then return nil, redis.error_reply('no such dead-letter entry ' .. id) end
  local ft = pairs_to_table(entry[1][2])
  if not ft['task_id'] or not ft['payload'] or not ft['created_at'] then
    return nil, redis.error_reply('entry ' .. id .. ' is not a task envelope: ' .. (ft['reason'] or ''))
  end
  if ft['truncated'] then
    return nil, redis.error_reply('entry ' .. id .. ' was cut to fit the dead-letter stream (' .. ft['truncated'] ..
      '): its task is not there to run again')
  end
  local out = {'task_id', ft['task_id'], 'tier', tier, 'payload', ft['payload'], 'created_at', ft['created_at']}
  for _, k in ipairs({'escalated_from', 'deadline', 'timeout', 'rate_limit', 'cost', 'tenant', 'task'}) do
    if ft[k] then out[#out + 1] = k; out[#out + 1] = ft[k] end
  end
  return ft, out
end
