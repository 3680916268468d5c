constraints = [{ attribute = "$${attr.kernel.name}", operator = "=", value = "linux" }]
control_url = "http://127.0.0.1:8080"
count = 1
cpu = 1000
datacenters = ["dc1", "dc2"]
disk = 500
gpu_count = 1
gpu_min_memory_mb = 8000
gpu_model = "RTX|A[0-9]+"
max = 4
memory = 2048
min = 1
node_pool = "default"
pool = "nvidia"
runner_command = "/opt/media \"jobs\"/$${x}"
sandbox = "bwrap"
