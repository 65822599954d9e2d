"""The lab: topology (compose variables, clients' argv), session (up/status/down), broker config, PKI."""
