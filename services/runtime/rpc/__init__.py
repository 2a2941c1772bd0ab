"""The gRPC plumbing every service shares: TLS channels and server credentials, health (the
health-only server and waiting for SERVING), and the decode guard every server installs."""
