#!/bin/sh
# Kafka (KRaft, broker+controller) in the ragstream-kafka image: server.properties is the one
# infra/kafka_service.py writes (rendered by infra/images.py), with this container's advertised
# host put in; the storage is formatted once (a standalone quorum of one voter) on the volume.
set -eu
# KAFKA_HEAP_OPTS and KAFKA_JVM_FLAGS: settings.infra.kafka_heap_mb and infra/'s JVM flags,
# unless the environment sets them.
. /opt/kafka/jvm.env
home=/var/lib/ragstream/kafka
host="${KAFKA_ADVERTISED_HOST:-$(hostname)}"
java="$JAVA_HOME/bin/java"
log="-Dlog4j2.configurationFile=/opt/kafka/log4j2.xml -Dkafka.logs.dir=$home/logs"
mkdir -p "$home/data" "$home/logs"
sed "s/__HOST__/$host/g" /opt/kafka/server.properties > "$home/server.properties"
if [ ! -f "$home/data/meta.properties" ]; then
  id="${KAFKA_CLUSTER_ID:-$("$java" $log -cp '/opt/kafka/libs/*' kafka.tools.StorageTool random-uuid)}"
  "$java" $log -cp '/opt/kafka/libs/*' kafka.tools.StorageTool format --standalone -t "$id" \
    -c "$home/server.properties"
fi
# shellcheck disable=SC2086 # word splitting of the flag lists is intended
exec "$java" $KAFKA_HEAP_OPTS $KAFKA_JVM_FLAGS $log -cp '/opt/kafka/libs/*' kafka.Kafka \
  "$home/server.properties"
