# The idem image: idem-broker, idem-coordinator and the idem CLI on an empty base
# (no registry can be reached to pull one). deploy/build-images.sh assembles rootfs/:
# the binaries (release, or stripped debug ones for the container tests), exactly the shared libraries `ldd` names, a non-root user; and
# home/, the empty /data that user owns.
FROM scratch
ARG VERSION=unknown
ARG COMMIT=unknown
ARG PROFILE=release
COPY rootfs/ /
COPY --chown=10001:10001 home/ /data/
LABEL org.opencontainers.image.title="idem" \
      org.opencontainers.image.description="idem broker, transaction/group coordinator and CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      dev.idem.build-profile="${PROFILE}"
ENV PATH=/usr/local/bin \
    IDEM_LOG=info
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
# 9092: a broker's clients; 9093: a coordinator's (or `idem dev`'s); 9094: Kafka clients.
EXPOSE 9092 9093 9094
# Which server runs is the orchestrator's choice (compose, Kubernetes): the image names
# none, so a bare `docker run` shows the CLI's help.
CMD ["idem", "--help"]
