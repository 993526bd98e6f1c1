DROP TABLE webhooks;
