# syntax=docker/dockerfile:1
# Folio for NVIDIA GPUs: built in the CUDA 13 devel image with the CUDA backend enabled
# (-DFOLIO_CUDA=ON), run in the CUDA 13 runtime image (cudart, cuBLAS, NCCL).
#
#   docker build -f docker/cuda.Dockerfile -t folio:cuda .
#   docker build -f docker/cuda.Dockerfile --build-arg CUDA_TAG=13.0.1-cudnn-devel-ubuntu24.04 ...
#
# NVIDIA publishes these images on Ubuntu, not Debian; ./folio deps installs the same
# package names there. Same build script as CI and docker/cpu.Dockerfile.
ARG CUDA_VERSION=13.0.1
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ENV DEBIAN_FRONTEND=noninteractive
# The build context has no .git: pass --build-arg FOLIO_GIT_REV=$(git rev-parse --short HEAD).
ARG FOLIO_GIT_REV=unknown
WORKDIR /src
COPY . .
RUN FOLIO_GIT_REV=${FOLIO_GIT_REV} FOLIO_BUILD_ONLY=1 FOLIO_BUILD_DIR=/build \
    FOLIO_CMAKE_ARGS="-DFOLIO_CUDA=ON -DFOLIO_BUILD_BENCHMARKS=OFF" \
    ./folio install /opt/folio

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /opt/folio/runtime-packages.txt /tmp/runtime-packages.txt
# The CUDA libraries' packages are already in the runtime image; the rest comes from apt.
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 folio \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin folio
COPY --from=build /opt/folio/bin/ /usr/local/bin/
# The embedded default model (stories260K), at bin/../models/ as an installed tree has it.
COPY --from=build /opt/folio/models/ /usr/local/models/
USER 10001:10001
EXPOSE 50051 9090
CMD ["folio-frontend", "--help"]
