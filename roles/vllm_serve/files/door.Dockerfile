# The front door (module_utils/plan/door.py): Debian 12's nginx, which gets Debian's security updates, and nothing
# else. roles/vllm_serve/tasks/door.yml builds it on a head that lacks it (about 15 s); the simulated cluster builds this
# same file on its own Debian base. For a build that does not drift, pin the base by its digest:
#   docker build --build-arg BASE_IMAGE=debian:12-slim@sha256:<digest> -t dgx-spark-vllm/door:1 .
ARG BASE_IMAGE=debian:12-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/default \
 && nginx -v
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
