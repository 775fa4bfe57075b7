"""The Kafka sink: TiCDC's MQ sink (cdc/sink/dmlsink/mq) producing with librdkafka."""

from sparkcdc import errors as _errors

# TODO(errors.py owner): move next to the other codes.
ErrKafkaSendMessage = _errors._define("ErrKafkaSendMessage", 500)
ErrKafkaTopic = _errors._define("ErrKafkaTopic", 400)
ErrAvroSchemaRegistry = _errors._define("ErrAvroSchemaRegistry", 500)
