--[[ Training Gate: Slurm's submit hook (JobSubmitPlugins=lua; this file sits next to slurm.conf).

A job that requests GPUs (--gres=gpu:N, --gpus[-per-node|-per-task|-per-socket]) is judged by the gate:
the hook runs `lib.slurm.hook.main()` (absolute interpreter, repo as working directory and PYTHONPATH), which
asks the warm gate server or judges the job in-process (lib.slurm.judge: the job description as a gate
request, decided and recorded by lib.ledger.deciding.submit_request(origin="slurm")) and answers with an
exit code:
  0 admitted        -> accept (job name set to the run ID so the sacct import lands on the same run;
                       a TIME line becomes the time limit: the comment's runtime when the job set
                       none, or a lower one from the spend limit or the calibrated wall clock,
                       lib/slurm/limits.py)
  1 refused         -> slurm.log_user(one line: every reason code and its fix), return slurm.ERROR
  3 gate failure, policy refuse           -> message, slurm.ERROR
  4 gate failure, policy accept-and-flag  -> message, admin_comment flag, accept
  5 deferred, only time cures it (the warm gate server's answer, lib.slurm.holds) -> accept HELD:
                       priority 0 (an admin hold, reason JobHeldAdmin: only root / SlurmUser /
                       an operator can release it), the HOLD line as admin_comment, NAME and TIME as
                       for an admit; the gate server releases it when the gate admits the run
  anything else (interpreter missing, killed by the time-out, no answer) -> the failure policy, here.
Jobs with no GPU request pass untouched, without starting Python.

Settings come from HOOK_CONF (KEY=VALUE lines, re-read at every submission; written by cluster.sh start):
TG_PYTHON, TG_REPO, GATE_DB, TG_ON_GATE_FAILURE (refuse|accept-and-flag), TG_GATE_TIMEOUT_S,
TG_GATE_SOCKET (warm gate server), TG_HOOK_LOG (stderr), TG_FLAG_LOG (failures, JSON lines),
TG_DEFAULT_PARTITION, TG_PYCACHE (bytecode cache dir, so `python -S` does not recompile every time),
TG_ON_DEFER (refuse: refuse deferred jobs, as before holding them existed; default hold), TG_GATE_UID
(the uid the gate server runs as, when not root: the one besides root that may release a held job).

Fast path: when LuaSocket (Debian's lua-socket) is there and the warm gate server listens on
TG_GATE_SOCKET, the hook sends the job description straight to it over the Unix socket, in the
server's wire format (NUL-separated "f:<field>", value, ..., "c:<key>", value), and reads
"<exit code>\n" + the answer lines: no process is started. Otherwise (no LuaSocket, no server) it
starts `python -S` as below, which asks the server itself or decides in-process.

Lua 5.1 inside slurmctld: io.popen():close() gives no exit status, hence `; echo EXIT=$?`. Never return
nil (nil ACCEPTS the job): every refusal returns slurm.ERROR.
]]

local has_unix, unix = pcall(require, "socket.unix")

local HOOK_CONF = "/tmp/tg-slurm/etc/job_submit_gate.conf"  -- rewritten by cluster.sh start
local HOLD_PREFIX = "training-gate: queued run "  -- a held job's admin comment (lib.slurm.holds)

local function read_conf()
  local conf = {TG_ON_GATE_FAILURE = "refuse", TG_GATE_TIMEOUT_S = "5"}
  local f = io.open(HOOK_CONF, "r")
  if not f then return conf, "hook config " .. HOOK_CONF .. " is missing" end
  for line in f:lines() do
    local k, v = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if k and not line:match("^%s*#") then conf[k] = v end
  end
  f:close()
  return conf, nil
end

-- single-quote for /bin/sh: nothing inside '...' is expanded; a ' becomes '\''
local function q(v)
  if v == nil then return "''" end
  return "'" .. tostring(v):gsub("'", "'\\''") .. "'"
end

local function has_gpu(s)
  return s ~= nil and string.find(string.lower(tostring(s)), "gpu", 1, true) ~= nil
end

local function wants_gpus(job_desc)
  return has_gpu(job_desc.tres_per_node) or has_gpu(job_desc.tres_per_job) or
         has_gpu(job_desc.tres_per_task) or has_gpu(job_desc.tres_per_socket)
end

local function hook_log(conf, text)
  local path = conf.TG_HOOK_LOG
  if not path or path == "" then return end
  local f = io.open(path, "a")
  if f then f:write(os.date("!%Y-%m-%dT%H:%M:%SZ"), " lua: ", text, "\n"); f:close() end
end

-- the failure policy applied here, when Python gave no usable answer
local function gate_failed(conf, job_desc, why)
  hook_log(conf, "gate failure: " .. why)
  if conf.TG_ON_GATE_FAILURE == "accept-and-flag" then
    local msg = "training-gate: WARNING the gate could not judge this job (" .. why ..
                "); accepted unchecked and flagged for review (TG_ON_GATE_FAILURE=accept-and-flag)"
    job_desc.admin_comment = "training-gate: accepted unchecked: " .. why
    slurm.log_user("%s", msg)
    return slurm.SUCCESS
  end
  slurm.log_user("%s", "training-gate: refused: the gate could not judge this job (" .. why ..
                 "); try again shortly or ask the gate's operator (TG_ON_GATE_FAILURE=refuse)")
  return slurm.ERROR
end

-- the job description as the gate reads it: (field, value) in the order lib.slurm.wire.JOB_FIELDS lists them
local function job_fields(job_desc, submit_uid)
  return {
    {"account", job_desc.account}, {"partition", job_desc.partition},
    {"time_limit", job_desc.time_limit}, {"name", job_desc.name}, {"comment", job_desc.comment},
    {"user", job_desc.user_name}, {"uid", submit_uid}, {"work_dir", job_desc.work_dir},
    {"tres_per_node", job_desc.tres_per_node}, {"tres_per_job", job_desc.tres_per_job},
    {"tres_per_task", job_desc.tres_per_task}, {"tres_per_socket", job_desc.tres_per_socket},
    {"num_tasks", job_desc.num_tasks}, {"min_nodes", job_desc.min_nodes}, {"array", job_desc.array_inx},
  }
end

-- The warm server's answer as the Python client would print it ("...lines...EXIT=<code>"), or nil
-- when there is no LuaSocket or no server listening (then Python runs), or nil, "no answer" when the
-- server took the job and gave no answer.
local function ask_server(conf, job_desc, submit_uid)
  local path = conf.TG_GATE_SOCKET
  if not has_unix or not path or path == "" then return nil end
  local c = (unix.stream or unix)()
  if not c then return nil end
  c:settimeout((tonumber(conf.TG_GATE_TIMEOUT_S) or 5) + 8)
  if not c:connect(path) then c:close(); return nil end
  local parts = {}
  for _, kv in ipairs(job_fields(job_desc, submit_uid)) do
    if kv[2] ~= nil and tostring(kv[2]) ~= "" then
      parts[#parts + 1] = "f:" .. kv[1]; parts[#parts + 1] = tostring(kv[2])
    end
  end
  local config = {db = conf.GATE_DB, on_failure = conf.TG_ON_GATE_FAILURE, timeout_s = conf.TG_GATE_TIMEOUT_S,
                  flag_log = conf.TG_FLAG_LOG, default_partition = conf.TG_DEFAULT_PARTITION, socket = path,
                  on_defer = conf.TG_ON_DEFER}
  for k, v in pairs(config) do
    if v ~= nil and v ~= "" then parts[#parts + 1] = "c:" .. k; parts[#parts + 1] = tostring(v) end
  end
  local sent = c:send(table.concat(parts, "\0"))
  if not sent then c:close(); return nil end  -- nothing was taken: Python may still try
  c:shutdown("send")
  local answer, err, partial = c:receive("*a")
  c:close()
  answer = answer or partial
  local code, rest = (answer or ""):match("^(%d+)\n(.*)$")
  if not code then return nil, "no answer" end
  return rest .. "EXIT=" .. code, "served"
end

local function run_python(conf, job_desc, submit_uid, limit_s)
  local py, repo = conf.TG_PYTHON, conf.TG_REPO
  local args = {}
  for _, kv in ipairs(job_fields(job_desc, submit_uid)) do
    args[#args + 1] = "--" .. kv[1]:gsub("_", "-") .. " " .. q(kv[2])
  end
  -- -S: no site start-up (its .pth files cost ~50 ms); the module adds what it needs itself.
  -- Imported (not run as a script) so its bytecode is cached, under TG_PYCACHE, not in the repo.
  local pycache = ""
  if conf.TG_PYCACHE and conf.TG_PYCACHE ~= "" then
    pycache = " -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=" .. q(conf.TG_PYCACHE)
  end
  local cmd = "cd " .. q(repo) .. " && env" .. pycache .. " PYTHONPATH=" .. q(repo) ..
    " GATE_DB=" .. q(conf.GATE_DB) .. " TG_ON_GATE_FAILURE=" .. q(conf.TG_ON_GATE_FAILURE) ..
    " TG_GATE_TIMEOUT_S=" .. q(conf.TG_GATE_TIMEOUT_S) .. " TG_GATE_SOCKET=" .. q(conf.TG_GATE_SOCKET) ..
    " TG_FLAG_LOG=" .. q(conf.TG_FLAG_LOG) .. " TG_DEFAULT_PARTITION=" .. q(conf.TG_DEFAULT_PARTITION) ..
    " TG_ON_DEFER=" .. q(conf.TG_ON_DEFER) ..
    " timeout -k 2 " .. limit_s .. " " .. q(py) ..
    " -S -c 'import sys, lib.slurm.hook as h; sys.exit(h.main())' " ..
    table.concat(args, " ") .. " 2>>" .. q(conf.TG_HOOK_LOG or "/dev/null") .. "; echo EXIT=$?"
  local p = io.popen(cmd, "r")
  if not p then return nil end
  local out = p:read("*a") or ""
  p:close()
  return out
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if not wants_gpus(job_desc) then return slurm.SUCCESS end
  local conf, conf_err = read_conf()
  if conf_err then return gate_failed(conf, job_desc, conf_err) end
  local py, repo = conf.TG_PYTHON, conf.TG_REPO
  if not py or py == "" or not repo or repo == "" then
    return gate_failed(conf, job_desc, "TG_PYTHON or TG_REPO not set in " .. HOOK_CONF)
  end
  local limit_s = (tonumber(conf.TG_GATE_TIMEOUT_S) or 5) + 15
  local out, served = ask_server(conf, job_desc, submit_uid)
  if served == "no answer" then
    -- the server took the job but did not answer: never decide twice, apply the failure policy
    return gate_failed(conf, job_desc, "gate server did not answer")
  end
  if not out then out = run_python(conf, job_desc, submit_uid, limit_s) end
  if not out then return gate_failed(conf, job_desc, "cannot start the gate command") end
  local code = tonumber(out:match("EXIT=(%d+)%s*$"))
  local msg = out:match("MSG (.-)\n")
  local name = out:match("NAME (.-)\n")
  local flag = out:match("FLAG (.-)\n")
  local time_min = tonumber(out:match("TIME (%d+)\n"))
  if code == 0 then
    if name and name ~= "" and name ~= job_desc.name then job_desc.name = name end
    if time_min then job_desc.time_limit = time_min end
    -- every MSG line: the decision, then (from the warm gate server) the team's budget line
    for line in out:gmatch("MSG (.-)\n") do slurm.log_user("%s", line) end
    return slurm.SUCCESS
  elseif code == 1 or code == 3 then  -- refused: never accepted, whatever the failure policy
    slurm.log_user("%s", msg or "training-gate: refused (no message; see the gate's hook log)")
    return slurm.ERROR
  elseif code == 5 then  -- held: accepted with an admin hold; the gate server releases it
    local hold = out:match("HOLD (.-)\n")
    job_desc.priority = 0
    if hold then job_desc.admin_comment = hold end
    if name and name ~= "" and name ~= job_desc.name then job_desc.name = name end
    if time_min then job_desc.time_limit = time_min end
    for line in out:gmatch("MSG (.-)\n") do slurm.log_user("%s", line) end
    return slurm.SUCCESS
  elseif code == 4 then
    if flag then job_desc.admin_comment = flag end
    if name and name ~= "" and name ~= job_desc.name then job_desc.name = name end
    if msg then slurm.log_user("%s", msg) end
    return slurm.SUCCESS
  end
  local why = (code == 124 or code == 137) and ("no answer within " .. limit_s .. " s")
              or ("gate command exited " .. tostring(code) .. " without an answer")
  return gate_failed(conf, job_desc, why)
end

-- Changing a gated job's GPUs, time limit or partition after submission would bypass the gate: only
-- root may. Adding GPUs to a job that had none is refused the same way. Lowering a time limit takes
-- nothing the gate did not grant (the gate's epilog lowers a requeued job's to the spend it has left,
-- as SlurmUser): anyone may. Other changes pass.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then return slurm.SUCCESS end
  -- a job the gate holds in the queue (its admin comment says so) is released by the gate alone: by
  -- root, or the gate server's own uid (TG_GATE_UID, when it does not run as root)
  local held = job_rec and job_rec.admin_comment and
               string.sub(job_rec.admin_comment, 1, #HOLD_PREFIX) == HOLD_PREFIX
  local prio = job_desc.priority
  if held and prio ~= nil and prio ~= slurm.NO_VAL then
    local conf = read_conf()
    if tostring(modify_uid) ~= tostring(conf.TG_GATE_UID or "0") then
      slurm.log_user("%s", "training-gate: refused: this job waits in the gate's queue and starts by itself " ..
                     "when its turn comes (`python -m lib queue` shows the line); only the gate releases it")
      return slurm.ERROR
    end
    return slurm.SUCCESS
  end
  local gated = has_gpu(job_rec and job_rec.tres_fmt_req_str)
  local limit = job_desc.time_limit
  local sets_limit = limit ~= nil and limit ~= slurm.NO_VAL
  local lowers = sets_limit and job_rec ~= nil and tonumber(job_rec.time_limit) ~= nil and
                 limit < tonumber(job_rec.time_limit)
  local touches = (sets_limit and not lowers) or job_desc.partition ~= nil
  if wants_gpus(job_desc) or (gated and touches) then
    slurm.log_user("%s", "training-gate: refused: the GPUs, time limit and partition of a GPU job " ..
                   "cannot be changed after submission; cancel it and submit again so the gate can judge it")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

slurm.log_info("training-gate job_submit.lua loaded (config %s)", HOOK_CONF)
return slurm.SUCCESS
