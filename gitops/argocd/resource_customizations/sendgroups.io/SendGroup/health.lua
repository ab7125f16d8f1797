-- ArgoCD health check of sendgroups.io/SendGroup (docs/gitops.md, "Install the health check").
-- Input: `obj`, the SendGroup as ArgoCD sees it. Output: hs = {status=..., message=...}.
-- Reads only what the operator writes (status.observedGeneration, status.phase,
-- status.conditions, status.finishedAt and the counts); docs/api.md and
-- operator/sendgroup_operator/{conditions,plan}.py define them. Written for Lua 5.1 (ArgoCD's
-- gopher-lua) and tested with Debian's lua5.4 and lua5.1 (tests/unit/test_argocd_health.py)
-- and through argo-cd's own settings and health engine (tests/unit/test_argocd_engine.py).
--
--   phase Failed, condition Degraded=True (even without a phase)    -> Degraded
--   no status yet, observedGeneration behind metadata.generation     -> Progressing
--   QueueReachable=False (unless the group finished)                 -> Degraded
--   Paused, Dumped, Dumping while paused, spec.workers 0 with work   -> Suspended
--   Running with Suspended=True (provider pushback, ends by itself)  -> Suspended
--   Running with all allowed workers ready, Pending (no jobs yet),
--   Idle, Completed, Cancelled once purged                           -> Healthy
--   Running while workers start, Restoring, Cancelling (purging),
--   Deleting                                                         -> Progressing
--   a phase this script does not know (a newer operator)             -> Unknown
local hs = {}

-- ArgoCD runs a customization without Lua's string and math libraries unless argocd-cm also
-- sets resource.customizations.useOpenLibs.sendgroups.io_SendGroup: "true" (shipped in
-- gitops/argocd/argocd-cm.yaml). Without them, say so instead of failing on every object.
if string == nil or math == nil then
  hs.status = "Unknown"
  hs.message = "set resource.customizations.useOpenLibs.sendgroups.io_SendGroup: \"true\" in argocd-cm:"
    .. " this health check needs Lua's string and math libraries (gitops/argocd/argocd-cm.yaml)"
  return hs
end

local function num(value)
  if type(value) ~= "number" then
    return "0"
  end
  if value == math.floor(value) then
    return string.format("%d", value)
  end
  return string.format("%.1f", value)
end

local function condition(status, type_)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting: waiting for the workers to stop and the deletionPolicy to be applied"
  -- ArgoCD replaces the health of an object being deleted by its own "Pending deletion" unless
  -- the script returns deletionMessage (gitops-engine pkg/health pendingDeletionHealth).
  hs.deletionMessage = hs.message
  return hs
end

local status = obj.status or {}
-- Problems first: a pass whose changes the API server refused keeps the old status (even
-- none at all) and only adds Degraded=True (reason ApplyFailed).
local degraded = condition(status, "Degraded")
if status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = "Failed: " .. text(condition(status, "Ready"), "the operator gave up")
  if is_true(degraded) then
    hs.message = hs.message .. " (" .. text(degraded, degraded.reason or "Degraded") .. ")"
  end
  hs.message = hs.message .. "; change the spec to retry"
  return hs
end
if is_true(degraded) then
  hs.status = "Degraded"
  hs.message = (degraded.reason or "Degraded") .. ": " .. text(degraded, "see the events")
  return hs
end
if status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. num(generation)
  return hs
end

local spec = obj.spec or {}
local phase = status.phase
local queue = status.queue or {}
local workers = status.workers or {}
local progress = status.progress or {}
local dump = status.dump or {}
local ready = condition(status, "Ready")
local reachable = condition(status, "QueueReachable")
local suspended = condition(status, "Suspended")
local throttled = condition(status, "Throttled")
local finished = (phase == "Completed" or phase == "Cancelled") and status.finishedAt ~= nil

local counts = num(queue.total) .. " jobs queued, " .. num(progress.percent) .. "% delivered"

if reachable ~= nil and reachable.status == "False" and not finished then
  hs.status = "Degraded"
  hs.message = "Queue unreachable: " .. text(reachable, "Redis unreachable")
  return hs
end

if phase == "Completed" then
  hs.status = "Healthy"
  hs.message = "Completed: all jobs done, workers removed (" .. num(progress.delivered) .. " delivered, "
    .. num(progress.failed) .. " failed)"
elseif phase == "Cancelled" then
  if finished then
    hs.status = "Healthy"
    hs.message = "Cancelled: " .. text(ready, "workers stopped")
  else
    hs.status = "Progressing"
    hs.message = "Cancelling: " .. text(ready, "stopping workers and purging the queue")
  end
elseif phase == "Cancelling" then
  hs.status = "Progressing"
  hs.message = "Cancelling: " .. text(ready, "stopping workers and purging the queue")
elseif phase == "Deleting" then
  hs.status = "Progressing"
  hs.message = "Deleting: " .. text(ready, "waiting for the workers to stop")
elseif phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "Paused (spec.paused): " .. num(queue.total) .. " jobs wait in Redis"
elseif phase == "Dumping" then
  if spec.paused == true then
    hs.status = "Suspended"
    hs.message = "Paused: dumping the queue to the volume (" .. text(condition(status, "Dumped"), "dump Job") .. ")"
  else
    hs.status = "Progressing"
    hs.message = "Resuming: waiting for the running dump Job before restoring"
  end
elseif phase == "Dumped" then
  hs.status = "Suspended"
  hs.message = "Paused: " .. num(dump.totalJobs) .. " jobs dumped to the volume; set spec.paused false to restore them"
elseif phase == "Restoring" then
  hs.status = "Progressing"
  hs.message = "Restoring " .. num(dump.totalJobs) .. " dumped jobs before the workers start"
elseif phase == "Idle" then
  hs.status = "Healthy"
  hs.message = "Idle: queue empty, workers removed; new jobs bring them back"
elseif phase == "Pending" then
  hs.status = "Healthy"
  hs.message = "Waiting for jobs: no worker runs until the queue has work"
elseif phase == "Running" then
  if is_true(suspended) then
    hs.status = "Suspended"
    hs.message = "Provider pushback: " .. text(suspended, "sending suspended") .. " (resumes by itself; " .. counts .. ")"
  elseif (workers.desired or 0) == 0 and (queue.total or 0) > 0 then
    hs.status = "Suspended"
    hs.message = "spec.workers is 0: " .. num(queue.total) .. " jobs wait"
  elseif is_true(ready) then
    hs.status = "Healthy"
    hs.message = text(ready, "workers ready") .. "; " .. counts
  else
    hs.status = "Progressing"
    hs.message = text(ready, "workers starting") .. "; " .. counts
  end
  if is_true(throttled) then
    hs.message = hs.message .. "; throttled: " .. text(throttled, "global worker cap")
  end
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase) .. ": this health check is older than the operator"
end
return hs
