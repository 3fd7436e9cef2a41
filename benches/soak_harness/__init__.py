"""The soak harness of benches/soak.py: its workload, faults (an S3 fault proxy), reference model and queries."""
