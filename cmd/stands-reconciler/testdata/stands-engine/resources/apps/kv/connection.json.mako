{
  "endpoint": "${node.private_ip}",
  "port": ${preferences['port']},
  "credentials": {"user": "default", "password": "${preferences['password']}"},
  "url": "redis://default:${preferences['password']}@${node.private_ip}:${preferences['port']}/0"
}
