#!/usr/bin/env python3
"""Writes one OTLP export request to stdout, encoded by the OpenTelemetry
Python SDK's own OTLP encoder (what a Collector or SDK puts on the wire).

usage: otlp_payload.py metrics|logs proto|json [HOST]

Needs: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-common
(.ci/run installs them).
"""
import sys

from google.protobuf.json_format import MessageToJson
from opentelemetry.sdk.resources import Resource

HOST = sys.argv[3] if len(sys.argv) > 3 else "gpu-node-7"
RESOURCE = Resource.create({"host.name": HOST, "cluster": "c9", "service.name": "dcgm"})


def metrics():
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = provider.get_meter("dcgm-exporter")
    meter.create_observable_gauge(
        "DCGM_FI_DEV_XID_ERRORS",
        callbacks=[lambda _options: [Observation(79, {"gpu": "3", "UUID": "GPU-8f3b"})]],
    )
    meter.create_observable_gauge(
        "DCGM_FI_DEV_GPU_UTIL",
        callbacks=[lambda _options: [Observation(97.0, {"gpu": "3"})]],
    )
    return encode_metrics(reader.get_metrics_data())


def logs():
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("kernel")
    from opentelemetry._logs import LogRecord

    logger.emit(
        LogRecord(
            body="kernel: NVRM: Xid (PCI:0000:ca:00): 48, pid=221, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.",
            severity_number=SeverityNumber.ERROR,
            attributes={"gpu": "5"},
        )
    )
    return encode_logs(exporter.get_finished_logs())


def main():
    signal, encoding = sys.argv[1], sys.argv[2]
    request = metrics() if signal == "metrics" else logs()
    if encoding == "proto":
        sys.stdout.buffer.write(request.SerializeToString())
    else:
        # The Collector's otlp_json writes enums as integers (OTLP/JSON spec).
        sys.stdout.write(MessageToJson(request, use_integers_for_enums=True))


if __name__ == "__main__":
    main()
