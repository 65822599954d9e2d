"""Programs that run inside the testbed's containers. Standard library + paho-mqtt only."""
