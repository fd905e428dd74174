-- luacheck's settings for the Lua scripts of tierpool (worker/tierpool/scripts), linted as the server runs them:
-- each script with the helpers it includes (hack/luacheck.sh). The server runs Lua 5.1 with these libraries.
std = "lua51"
read_globals = {"redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct"}
max_line_length = 120
