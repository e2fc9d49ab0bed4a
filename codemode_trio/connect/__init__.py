"""The openers: a transport's byte stream made into a connection (client or gRPC role)."""
