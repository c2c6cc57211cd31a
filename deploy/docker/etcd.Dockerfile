# etcd from the distribution's etcd-server package, on an empty base, the same way as
# the idem image: the binary, its shared libraries, a non-root user, a data volume.
FROM scratch
ARG VERSION=unknown
COPY rootfs/ /
COPY --chown=10002:10002 home/ /var/lib/etcd/
LABEL org.opencontainers.image.title="etcd" \
      org.opencontainers.image.description="etcd from Debian's etcd-server package" \
      org.opencontainers.image.version="${VERSION}"
ENV PATH=/usr/local/bin \
    ETCD_DATA_DIR=/var/lib/etcd
USER 10002:10002
WORKDIR /var/lib/etcd
VOLUME ["/var/lib/etcd"]
EXPOSE 2379 2380
ENTRYPOINT ["etcd"]
