"""The CPU model name (/proc/cpuinfo), which every benchmark table names."""


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"
