# The controller manager's image, as the Helm chart runs it: a static binary on a
# distroless base, as user 65532. (The development machines have no container
# engine, so neither `make test` nor CI builds this image.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY apis/ apis/
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/carousel-controller-manager ./cmd/carousel-controller-manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/carousel-controller-manager /carousel-controller-manager
USER 65532:65532
ENTRYPOINT ["/carousel-controller-manager"]
