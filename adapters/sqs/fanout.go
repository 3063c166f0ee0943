package sqs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// EnsureGroupQueue wires a consumer group's queue to an SNS FIFO topic, for
// [SNSPublisher]'s fan-out: it creates the SQS FIFO queue queueName
// (idempotent; FifoQueue=true, ContentBasedDeduplication=false, plus
// attrs), sets its Policy to let the topic send to it (an existing policy is
// replaced), and subscribes it to topicARN with RawMessageDelivery=true, so
// the queue receives the published body and message attributes unchanged,
// with the publisher's MessageGroupId and MessageDeduplicationId. It returns
// the queue URL. Subscribe is idempotent for the same topic, queue and
// attributes.
//
// Messages published to the topic before the subscription exists are not
// delivered to the queue.
func EnsureGroupQueue(ctx context.Context, sqsClient SQSAPI, snsClient SNSAPI, topicARN, queueName string, attrs map[string]string) (string, error) {
	url, err := createFIFOQueue(ctx, sqsClient, queueName, attrs)
	if err != nil {
		return "", err
	}
	got, err := sqsClient.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("GetQueueAttributes %s: %w", queueName, err)
	}
	queueARN := got.Attributes[string(types.QueueAttributeNameQueueArn)]
	if queueARN == "" {
		return "", fmt.Errorf("GetQueueAttributes %s: no QueueArn", queueName)
	}
	policy, err := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":       "outbox-sns-" + queueName,
			"Effect":    "Allow",
			"Principal": map[string]string{"Service": "sns.amazonaws.com"},
			"Action":    "sqs:SendMessage",
			"Resource":  queueARN,
			"Condition": map[string]any{"ArnEquals": map[string]string{"aws:SourceArn": topicARN}},
		}},
	})
	if err != nil {
		return "", fmt.Errorf("queue policy: %w", err)
	}
	if _, err := sqsClient.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(url),
		Attributes: map[string]string{string(types.QueueAttributeNamePolicy): string(policy)},
	}); err != nil {
		return "", fmt.Errorf("SetQueueAttributes %s Policy: %w", queueName, err)
	}
	if _, err := snsClient.Subscribe(ctx, &sns.SubscribeInput{
		TopicArn:              aws.String(topicARN),
		Protocol:              aws.String("sqs"),
		Endpoint:              aws.String(queueARN),
		Attributes:            map[string]string{"RawMessageDelivery": "true"},
		ReturnSubscriptionArn: true,
	}); err != nil {
		return "", fmt.Errorf("Subscribe %s to %s: %w", queueName, topicARN, err)
	}
	return url, nil
}
