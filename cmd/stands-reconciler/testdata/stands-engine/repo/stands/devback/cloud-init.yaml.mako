#cloud-config
## The Stands Engine's cloud-init (its guide, section 4): the users, the stand's key, Podman.
users:
  - name: ${user_admin}
    groups: [sudo]
    shell: /bin/bash
    sudo: "ALL=(ALL) NOPASSWD:ALL"
    ssh_authorized_keys:
      - ${ssh_public_key}
  - name: ${user_app}
    shell: /bin/bash
packages: [podman, firewalld]
% if network_ip_range:
write_files:
  - path: /etc/stands/network
    content: "${network_ip_range}"
% endif
