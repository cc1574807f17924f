-- lightning-xpu modulefile body: the code of every lightning-xpu/<tag> modulefile, which holds only its data.
-- The install writes <prefix>/modulefiles/lightning-xpu/<tag>.lua (lxpu_admin/install/tagfiles.py) and copies this file
-- next to them as .lightning-xpu.lua (Lmod offers no dot file as a module). The environment is <prefix>/<tag>;
-- its site parts are data the install wrote into it: lightning-xpu-site-modules.txt (modules to load, one per
-- line) and lightning-xpu-site.sh (export NAME="${NAME:-value}" lines, read with source_sh so that `module unload`
-- reverts them exactly). A modulefile runs this file with Lmod's loadfile and passes its data table: contract, tag,
-- minor, variant, variant_description, torch, lightning, python, backend, notes, siblings (the tags of this minor),
-- install_job (for the hints) and, for a legacy recipe only, legacy (the line printed at each load).
-- One body serves every tag of a prefix, whose install jobs may come from different checkouts: bump CONTRACT
-- (recipes/render.py renders it into every modulefile) with any change to the fields or their meaning; a
-- modulefile of another contract then stops with one line naming the fix, reading only contract, tag, variant and
-- install_job: keep those four as they are.
local CONTRACT = 1

local data = ...
if type(data) ~= "table" then -- loaded as a module by its name (Lmod hides dot files but loads them if named)
  LmodError(myFileName() .. " is the code behind the lightning-xpu modulefiles, not a module: "
    .. "module avail lightning-xpu lists the installed ones")
end
local tag, minor, variant, install_job = data.tag, data.minor, data.variant, data.install_job
if data.contract ~= CONTRACT then
  if mode() == "spider" or mode() == "whatis" then return end
  local at = myFileName():match("^(.*)/modulefiles/lightning%-xpu/[^/]+%.lua$") or "<prefix>"
  LmodError("lightning-xpu/" .. tostring(tag) .. ": this modulefile was rendered for modulefile body contract "
    .. tostring(data.contract) .. ", but the body next to it ('" .. myFileName():match("^(.*/)")
    .. ".lightning-xpu.lua') has contract " .. CONTRACT .. " (an install from another checkout wrote it): rerun "
    .. tostring(install_job) .. " --variant " .. tostring(variant) .. " --prefix '" .. at .. "' from the checkout that "
    .. "installed the other versions here")
end

help("lightning-xpu " .. tag .. ": PyTorch " .. data.torch .. " (" .. data.variant_description
  .. ") with Lightning " .. data.lightning .. " and lightning_xpu.\n\n"
  .. "Your unchanged Lightning script runs on Intel GPUs: Trainer(accelerator=\"xpu\" | \"gpu\" | \"auto\"),\n"
  .. "strategy=\"ddp\" and precision=\"bf16-mixed\" work on XPU; CPU and CUDA behave as in plain Lightning.\n\n"
  .. "Distributed backend on XPU: " .. data.backend .. ". Python " .. data.python .. ".\n"
  .. "Your own packages: run `lightning-xpu user-env` once, load the module again, then pip install X\n"
  .. "(or uv pip install X): they go to your layer, $HOME/.local/lightning-xpu/" .. tag .. ", within this version's pins.\n"
  .. (data.notes ~= "" and data.notes .. "\n" or ""))

-- A legacy recipe (recipes/matrix.toml [discontinued]) names the recipe to move to at each load.
if mode() == "load" and data.legacy then LmodMessage(data.legacy) end

whatis("Name: lightning-xpu")
whatis("Version: " .. tag)
whatis("Description: PyTorch " .. data.torch .. " (" .. variant .. "), Lightning " .. data.lightning .. ", lightning_xpu")
whatis("Category: machine learning")
family("lightning_xpu")
extensions("torch/" .. data.torch .. ", lightning/" .. data.lightning)

-- Paths in hints, single-quoted for the shell (a prefix may contain spaces).
local function quoted(path) return "'" .. path:gsub("'", "'\\''") .. "'" end
local modfile = myFileName()
local prefix = modfile:match("^(.*)/modulefiles/lightning%-xpu/[^/]+%.lua$")
if not prefix then
  LmodError("lightning-xpu/" .. tag .. ": this modulefile must sit in <prefix>/modulefiles/lightning-xpu/ "
    .. "(as the install job puts it), not at " .. quoted(modfile))
end

-- Variant guard (issue 14): Lmod 8.6 matches a version by prefix, so lightning-xpu/<minor> would load this
-- <variant> build when no other <minor> is installed; refuse that, naming the installed variants (a load without
-- a version, or by its full name, is Lmod's choice and passes).
if mode() == "load" then
  local asked = myModuleUsrName():match("^[^/]+/(.+)$")
  if asked and asked ~= tag and asked ~= "default" and asked ~= "latest" then
    local installed = {}
    for dir in (os.getenv("MODULEPATH") or ""):gmatch("[^:]+") do
      for _, sibling in ipairs(data.siblings) do
        local name = "lightning-xpu/" .. sibling
        if isFile(pathJoin(dir, name .. ".lua")) and not installed[name] then
          installed[name] = true
          installed[#installed + 1] = name
        end
      end
    end
    LmodError("lightning-xpu/" .. asked .. " is not installed: Lmod matched it to lightning-xpu/" .. tag
      .. " (" .. variant .. "), which is not what you asked for. Load it by its exact name, module load lightning-xpu/" .. tag
      .. ", or install " .. asked .. ". Installed variants of " .. minor .. ": " .. table.concat(installed, ", "))
  end
end

local root = pathJoin(prefix, tag)
local user_layer = nil
local cache_env = {} -- the node-local compile caches' variables (lxpu_admin/envside/setup_lib.py cache_exports)
-- BEGIN build pinning and lease (docs/architecture.md "Install layout"; lxpu_admin/install/leases.py): resolve
-- <prefix>/<tag> now to the ONE immutable build it points to, so a rebuild changes nothing for this job, record a
-- lease <prefix>/.leases/<build>@<host>.<job>.<random> that keeps installs, --prune and --uninstall from removing
-- that build while the job or shell lives (in bash and zsh the shell and its children hold a shared flock on it),
-- and find the user layer. At load the setup library's Python half does all three, as for the setup script
-- (<prefix>/.lightning-setup.lib.py, lxpu_admin/envside/setup_lib.py: one implementation, which creates the lease
-- exclusively, never through a link another account planted in a shared .leases); unload undoes exactly what was
-- loaded, from the environment alone (the build and the layer may be gone by then).
do
  local function follow(path)
    for _ = 1, 8 do
      local target = lfs.symlinkattributes(path, "target")
      if not target then return path end
      if target:sub(1, 1) ~= "/" then target = path:match("^(.*)/[^/]*$") .. "/" .. target end
      path = target
    end
    return path
  end
  local holds_fd = myShellName() == "bash" or myShellName() == "zsh"
  if mode() == "unload" then
    local loaded = os.getenv("LIGHTNING_XPU_ROOT") or ""
    if loaded:sub(1, #prefix + 7) == prefix .. "/.envs/" then
      root = loaded -- unload exactly what was loaded, wherever the link points now
    end
    -- The layer is in use when VIRTUAL_ENV names it (the load put it last).
    local layer = pathJoin(os.getenv("LIGHTNING_XPU_USER_BASE")
      or pathJoin(os.getenv("HOME") or "", ".local/lightning-xpu"), tag)
    if os.getenv("VIRTUAL_ENV") == layer then user_layer = layer end
    -- The cache variables the load set are the ones it listed (a variable the user set was never in the list).
    local listed = os.getenv("LIGHTNING_XPU_CACHE_VARIABLES")
    if listed then
      for name in ("LIGHTNING_XPU_CACHE LIGHTNING_XPU_CACHE_VARIABLES " .. listed):gmatch("%S+") do
        cache_env[#cache_env + 1] = {name, os.getenv(name) or ""}
      end
    end
    if holds_fd then
      execute{cmd = "[ -z \"${__lxpu_lease_fd:-}\" ] || { exec {__lxpu_lease_fd}<&-; unset __lxpu_lease_fd; }",
        modeA = {"unload"}}
    end
  elseif mode() == "load" and isFile(pathJoin(root, "bin/python")) then
    -- Lmod's capture() clears LD_LIBRARY_PATH and LD_PRELOAD: give the Python the user's (a site's Python may
    -- need its libraries).
    local function assign(name) return name .. "=" .. quoted(os.getenv(name) or "") .. " " end
    local out = capture(assign("LD_LIBRARY_PATH") .. assign("LD_PRELOAD") .. quoted(pathJoin(root, "bin/python"))
      .. " -I -S " .. quoted(pathJoin(prefix, ".lightning-setup.lib.py")) .. " --modulefile " .. quoted(prefix)
      .. " " .. quoted(tag) .. " 2>&1") or ""
    local pinned = nil
    for line in out:gmatch("[^\n]+") do
      local key, value = line:match("^(%a+)=(.*)$")
      if key == "root" then pinned = value
      elseif key == "layer" then user_layer = value
      elseif key == "say" then LmodMessage(value)
      elseif key == "env" then
        local name, setting = value:match("^([%w_]+)=(.*)$")
        if name then cache_env[#cache_env + 1] = {name, setting} end
      elseif key == "flock" and holds_fd then execute{cmd = value, modeA = {"load"}}
      elseif key ~= "flock" then LmodMessage("lightning-xpu/" .. tag .. ": " .. line)
      end
    end
    if not pinned then
      LmodError("lightning-xpu/" .. tag .. ": " .. quoted(pathJoin(root, "bin/python")) .. " cannot run the "
        .. "setup library " .. quoted(pathJoin(prefix, ".lightning-setup.lib.py")) .. ": rerun " .. install_job
        .. " --variant " .. variant .. " --force --prefix " .. quoted(prefix))
    end
    root = pinned
  else
    root = follow(root)
  end
end
-- END build pinning and lease
local site_env = pathJoin(root, "lightning-xpu-site.sh")
if mode() == "load" then
  if not isFile(pathJoin(root, "bin/python")) then
    LmodError("lightning-xpu/" .. tag .. ": no environment at " .. quoted(root)
      .. ": run " .. install_job .. " --variant " .. variant .. " --prefix " .. quoted(prefix))
  end
  if not isFile(site_env) then
    LmodError("lightning-xpu/" .. tag .. ": " .. quoted(site_env) .. " is missing (incomplete install): "
      .. "rerun " .. install_job .. " --variant " .. variant .. " --force --prefix " .. quoted(prefix))
  end
end

-- Site prerequisite modules, one per line; no file: none (e.g. unload after removal).
local modules_file = io.open(pathJoin(root, "lightning-xpu-site-modules.txt"), "r")
if modules_file then
  for line in modules_file:lines() do
    local name = line:match("^%s*([^%s#]%S*)%s*$")
    if name then depends_on(name) end
  end
  modules_file:close()
end

prepend_path("PATH", pathJoin(root, "bin"))
pushenv(isDir(pathJoin(root, "conda-meta")) and "CONDA_PREFIX" or "VIRTUAL_ENV", root)
-- PYTHONUSERBASE: where `pip install --user` goes in a conda environment (a venv refuses --user).
pushenv("PYTHONUSERBASE", pathJoin(os.getenv("HOME") or "", ".local/lightning-xpu/" .. tag))
-- The environment's pins bind every pip and uv install, into it or into the user layer (lxpu_admin/envside/pins.py).
-- Added to what the variables hold: both are lists split at white space, and a site's own constraints apply too;
-- another lightning-xpu environment's pins (a setup script sourced before) leave. pushenv: `module unload` puts
-- back exactly the value from before the load (unset if it was unset).
local constraints = pathJoin(root, "share/lightning-xpu/constraints.txt")
-- As a file: URL, percent-encoded (a prefix may have spaces).
local pins_url = "file://" .. constraints:gsub("[^%w/._~-]", function(c) return string.format("%%%02X", c:byte()) end)
local function with_pins(name)
  local words, suffix = {}, "/share/lightning-xpu/constraints.txt"
  for word in (os.getenv(name) or ""):gmatch("%S+") do
    if word:sub(-#suffix) ~= suffix then words[#words + 1] = word end
  end
  words[#words + 1] = pins_url
  return table.concat(words, " ")
end
local function pinned_here(name)
  if mode() == "unload" then return (os.getenv(name) or ""):find(pins_url, 1, true) ~= nil end
  return isFile(constraints)
end
if pinned_here("PIP_CONSTRAINT") then pushenv("PIP_CONSTRAINT", with_pins("PIP_CONSTRAINT")) end
if pinned_here("UV_CONSTRAINT") then pushenv("UV_CONSTRAINT", with_pins("UV_CONSTRAINT")) end
-- The user's writable layer (`lightning-xpu user-env`, lightning_xpu/commands/userenv.py): its bin/ first.
-- Whether to use it (its prefix and build, lxpu_admin/envside/setup_lib.py layer_verdict) the Python half said at load.
if user_layer then
  prepend_path("PATH", pathJoin(user_layer, "bin"))
  pushenv("VIRTUAL_ENV", user_layer)
end
pushenv("LIGHTNING_XPU_ROOT", root)
-- Node-local compile caches (Triton, TorchInductor, SYCL, Level Zero), unless set before: pushenv, so that unload
-- puts back exactly what was there.
for _, setting in ipairs(cache_env) do pushenv(setting[1], setting[2]) end
-- Jupyter lists the install's prefix-wide kernel specs (`lightning-xpu kernel install --prefix-wide`,
-- lightning_xpu/commands/kernel.py) wherever the module is loaded; the setup script adds the same directory.
prepend_path("JUPYTER_PATH", pathJoin(prefix, "share/jupyter"))

-- The site variables (only where the user has not set them); source_sh runs bash on the quoted path.
source_sh("bash", quoted(site_env))

-- Node-local staging (issue 15, lightning-xpu-stage --help): with LIGHTNING_XPU_STAGE=1, switch a job's shell
-- to node-local copies or SquashFS mounts (=1 picks, =mount and =copy force one: issue 30). Unloading does not undo
-- the switch: end the job script instead.
local stage = pathJoin(root, "bin/lightning-xpu-stage")
local staging = os.getenv("LIGHTNING_XPU_STAGE")
if mode() == "load" and (staging == "1" or staging == "mount" or staging == "copy") and isFile(stage) then
  execute{cmd = "eval \"$(" .. quoted(stage) .. " --shell-if-job)\"", modeA = {"load"}}
end
