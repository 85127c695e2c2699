"""Reaching the nodes: SSH to many nodes at once (transport), what every node is (facts),
which node pairs to try, what a failed ssh means, the ARP table's limits, and running the
playbooks with Ansible."""
