# The controller manager's image for people with a container engine. `make image` builds the same image
# without one (hack/image, the image the Helm chart defaults to): a static binary, run as user 65532, with
# the same entrypoint and OCI labels; hack/image's TestDockerfileDescribesTheImage keeps the two in step.
#   docker build --build-arg VERSION=$(cat VERSION) --build-arg REVISION=$(git rev-parse HEAD) .
FROM golang:1.26 AS build
ARG VERSION=unknown
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY apis/ apis/
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/carousel-dev/carousel/pkg/version.version=${VERSION} -X github.com/carousel-dev/carousel/pkg/version.revision=${REVISION}" \
      -o /out/carousel-controller-manager ./cmd/carousel-controller-manager

FROM gcr.io/distroless/static:nonroot
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="carousel-controller-manager" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/carousel-dev/carousel"
COPY --from=build /out/carousel-controller-manager /carousel-controller-manager
USER 65532:65532
ENTRYPOINT ["/carousel-controller-manager"]
