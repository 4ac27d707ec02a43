apiVersion: v1
kind: Pod
metadata:
  name: ${instance}
  labels:
    stands/app: kv
spec:
  containers:
    - name: kv
      image: ${preferences['image']}
      args: ["redis-server", "/etc/kv/redis.conf"]
      ports:
        - containerPort: ${preferences['port']}
          hostPort: ${preferences['port']}
      volumeMounts:
        - name: config
          mountPath: /etc/kv/redis.conf
          readOnly: true
  volumes:
    - name: config
      hostPath:
        path: /home/${user_app}/stands/${instance}/redis.conf
        type: File
