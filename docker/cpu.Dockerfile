# syntax=docker/dockerfile:1
# Folio for CPUs: one image with every folio binary in /usr/local/bin.
#
#   docker build -f docker/cpu.Dockerfile -t folio:cpu .
#
# Stage 1 builds with the project's own script (./folio install runs ./folio build, as CI
# does), so the image and CI cannot build differently. Stage 2 is Debian 12 slim with only
# the shared libraries the binaries link: ./folio install lists their Debian packages.

FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
# The build context has no .git: pass --build-arg FOLIO_GIT_REV=$(git rev-parse --short HEAD).
ARG FOLIO_GIT_REV=unknown
WORKDIR /src
COPY . .
RUN FOLIO_GIT_REV=${FOLIO_GIT_REV} FOLIO_BUILD_ONLY=1 FOLIO_BUILD_DIR=/build \
    FOLIO_CMAKE_ARGS="-DFOLIO_BUILD_BENCHMARKS=OFF" \
    ./folio install /opt/folio

FROM debian:12-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /opt/folio/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 folio \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin folio
COPY --from=build /opt/folio/bin/ /usr/local/bin/
# The embedded default model (stories260K), at bin/../models/ as an installed tree has it.
COPY --from=build /opt/folio/models/ /usr/local/models/
# Numeric, so Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 10001:10001
# frontend gRPC and /metrics; the other services take their ports from flags.
EXPOSE 50051 9090
CMD ["folio-frontend", "--help"]
