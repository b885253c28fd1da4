"""moto's S3 server on loopback, for remote-source tests. Not a test module.

`with S3() as s3:` starts it; `s3.upload(folder, "bucket/prefix")` copies a dataset folder into it;
`s3.options()` (or `options(endpoint)`, e.g. a fault proxy in front of it) are the `storage_options` that reach it
with the test keys."""

from __future__ import annotations

from pathlib import Path

KEYS = {"key": "AKIDTESTING", "secret": "s3cr3t-key"}
REGION = "us-east-1"


class S3:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.url = ""

    def __enter__(self) -> "S3":
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()

    def upload(self, folder: Path, where: str) -> str:
        """Every file under `folder` into `where` ("bucket/prefix", the bucket made if new); its s3:// URL."""
        import boto3

        bucket, _, prefix = where.partition("/")
        client = boto3.client("s3", endpoint_url=self.url, region_name=REGION, aws_access_key_id=KEYS["key"],
                              aws_secret_access_key=KEYS["secret"])
        if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=bucket)
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")
        return f"s3://{where}"

    def options(self, endpoint: str | None = None) -> dict:
        return options(endpoint or self.url)


def options(endpoint: str) -> dict:
    """`storage_options` reaching the S3 server (or a proxy in front of it) at `endpoint` with the test keys."""
    return {**KEYS, "endpoint_url": endpoint, "client_kwargs": {"region_name": REGION}}
