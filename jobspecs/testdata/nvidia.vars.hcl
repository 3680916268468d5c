cpu = 2000
datacenters = ["dc1", "dc2"]
gpus = 2
memory = 4096
node_pool = "gpu"
pool = "nvidia"
runner_command = "/opt/media \"jobs\"/$${x}"
