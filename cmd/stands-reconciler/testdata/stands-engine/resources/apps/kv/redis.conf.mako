## ${instance}: one store per instance
port ${preferences['port']}
bind 0.0.0.0
protected-mode yes
requirepass ${preferences['password']}
maxmemory ${preferences['maxmemory']}
maxmemory-policy allkeys-lru
% if preferences['persist']:
appendonly yes
% else:
appendonly no
% endif
% for key, value in preferences['extra_config'].items():
${key} ${value}
% endfor
