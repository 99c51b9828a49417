# The es-changefeed image: a static binary (CGO_ENABLED=0) on distroless
# static, run as the non-root user nonroot (uid 65532); about 30 MB.
#
#   docker build -t es-changefeed:dev --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm es-changefeed:dev version
#
# The compose files in compose/ build it (build: context ..) and run the
# relay and a consumer from it. The binary takes the same flags and ESCF_*
# environment variables as outside a container; bind --metrics-addr to
# 0.0.0.0:9464 to be scraped from other containers.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# The modules first: a change of the code alone reuses this layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION is what `es-changefeed version` prints first (main.version),
# REVISION its revision line (main.revision). .git is not in the build
# context (.dockerignore), hence -buildvcs=false: Go cannot stamp either.
ARG VERSION=dev
ARG REVISION=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/es-changefeed . \
 && /out/es-changefeed version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/es-changefeed /usr/local/bin/es-changefeed
USER nonroot:nonroot
# --metrics-addr (/metrics, /healthz, /readyz, the status page).
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/es-changefeed"]
CMD ["--help"]
