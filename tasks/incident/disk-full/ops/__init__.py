"""Operations helpers for the api-gateway hosts."""
