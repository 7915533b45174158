"""Which IAM actions the Pulumi AWS provider calls to create, read back, update and delete each resource that has a
resource policy or is governed by one, the resource each action is authorised on, and where in the provider's
source the calls were read.

pulumi-aws (`PULUMI_AWS_VERSION`) wraps the Terraform AWS provider's v6 line. The calls of each CRUD function (and of
the helpers it calls: finders, waiters, the transparent tagging) were read in hashicorp/terraform-provider-aws, in
the stored versions of the files the search index holds; the exact upstream tag that pulumi-aws 7.51.1 pins could not
be resolved offline, so each entry names the markers of the version read (`read_at`). The SDK operation to IAM action
mapping is the Service Authorization Reference (docs.aws.amazon.com/service-authorization/latest/reference/, pages
list_amazons3, list_awskeymanagementservice, list_amazonsqs, list_amazonsns, list_amazonelasticcontainerregistry,
list_amazonec2, list_awscloudtrail) and, for S3, the S3 User Guide page named in `provider_actions_s3`.

A phase's actions are the calls its function makes itself; `actions_for` adds the read phase's calls to create and
update where the function ends by calling read (`reads_after`), since the phase fails without them. A row with a
non-empty `when` is made only under that condition; `resource_arn` fills a row's resource template with the
resource's ARN (and, for a KMS alias, its target key's ARN).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .provider_actions_s3 import S3_ENTRIES

__all__ = [
    "PULUMI_AWS_VERSION",
    "PROVIDER_UPSTREAM",
    "PROVIDER_PHASES",
    "OWN_ARN",
    "OBJECTS_OF",
    "ANY_RESOURCE",
    "TARGET_KEY_ARN",
    "RESOURCE_TEMPLATES",
    "ProviderAction",
    "ProviderEntry",
    "PROVIDER_ACTIONS",
    "UNGOVERNED_TYPES",
    "provider_entry",
    "actions_for",
    "resource_arn",
]

PULUMI_AWS_VERSION = "7.51.1"
"""The pulumi-aws release the stack pins (pyproject.toml); its tests hold the installed distribution to it."""

PROVIDER_UPSTREAM = "hashicorp/terraform-provider-aws"
"""The repository the CRUD functions were read in (the v6 line; pulumi-aws 7.x upgraded to it in pulumi-aws#5665)."""

PROVIDER_PHASES = ("create", "read", "update", "delete")
"""The phases of a resource's life the provider runs: read is also what `pulumi refresh` runs."""

OWN_ARN = "{arn}"
"""Template: the resource's own ARN (for a policy or configuration resource, the ARN of what it configures)."""
OBJECTS_OF = "{arn}/*"
"""Template: every object in the bucket, the S3 `object` resource type."""
ANY_RESOURCE = "*"
"""Template: the action supports no resource-level permission (the Service Authorization Reference lists none)."""
TARGET_KEY_ARN = "{target_key_arn}"
"""Template: the KMS key an alias points to (KMS authorises alias actions on the alias and on the key)."""
RESOURCE_TEMPLATES = (OWN_ARN, OBJECTS_OF, ANY_RESOURCE, TARGET_KEY_ARN)
"""Every resource template a row may carry."""


@dataclass(frozen=True)
class ProviderAction:
    """One IAM action a provider call needs, and the resource it is authorised on."""

    action: str
    """The IAM action, `service:Action` (e.g. `s3:GetBucketPolicy`); no default."""
    api: str
    """The SDK operation the provider calls that needs it (e.g. `GetBucketPolicy`); no default."""
    resource: str
    """Where it is authorised, one of `RESOURCE_TEMPLATES`; no default."""
    when: str = ""
    """The condition under which the provider makes the call; default "" (every time the phase runs)."""


@dataclass(frozen=True)
class ProviderEntry:
    """What the provider calls for one Pulumi resource type in each phase, and where that was read."""

    type_token: str
    """The Pulumi type token, e.g. `aws:s3/bucket:Bucket`; no default."""
    terraform_type: str
    """The Terraform resource pulumi-aws wraps, e.g. `aws_s3_bucket`; no default."""
    source_file: str
    """The file in `PROVIDER_UPSTREAM` holding the CRUD functions; no default."""
    functions: tuple[str, str, str, str]
    """The create, read, update and delete functions, in `PROVIDER_PHASES` order ("" where there is none)."""
    arn_of: str
    """What `{arn}` stands for: the resource itself, or the resource it configures; no default."""
    create: tuple[ProviderAction, ...]
    """The calls of the create function itself; no default."""
    read: tuple[ProviderAction, ...]
    """The calls of the read function (the transparent tag listing included); no default."""
    update: tuple[ProviderAction, ...]
    """The calls of the update function; () when every argument forces a replacement; no default."""
    delete: tuple[ProviderAction, ...]
    """The calls of the delete function (its waiters included); no default."""
    reads_after: tuple[str, ...] = ()
    """The phases whose function ends by calling the read function; default () (none)."""
    helpers: tuple[str, ...] = ()
    """Other files and functions the CRUD functions call whose calls are listed; default ()."""
    read_at: str = ""
    """Which stored version of `source_file` was read (its markers); default ""."""
    note: str = ""
    """Anything else a reader of the rows needs; default ""."""

    def phase(self, phase: str) -> tuple[ProviderAction, ...]:
        """The calls of one phase's own function."""
        if phase not in PROVIDER_PHASES:
            raise ValueError(f"phase: {phase!r} is not one of {', '.join(PROVIDER_PHASES)}")
        return getattr(self, phase)


_V6_IDENTITY = "v6 line (carries v6 resource-identity annotations)"
_V6_SDKV2 = "v6-era file (AWS SDK for Go v2 client, tag-on-create with partition fallback)"

_OTHER_ENTRIES: dict[str, dict] = {
    "aws:kms/key:Key": {
        "terraform": "aws_kms_key", "file": "internal/service/kms/key.go",
        "functions": ("resourceKeyCreate", "resourceKeyRead", "resourceKeyUpdate", "resourceKeyDelete"),
        "helpers": ("internal/service/kms/wait.go: waitIAMPropagation, waitKeyPolicyPropagated, waitTagsPropagated, "
                    "waitKeyStatePropagated, waitKeyRotationEnabledPropagated, waitKeyDeleted",),
        "arn_of": "the key: arn:aws:kms:REGION:ACCOUNT:key/KEY_ID", "reads_after": ("create", "update"),
        "read_at": "SDK v2 KMSClient version with rotation_period_in_days (v5.5x onwards; unchanged calls in v6)",
        "create": (
            ("kms:CreateKey", "CreateKey", ANY_RESOURCE, ""),
            ("kms:TagResource", "CreateKey", ANY_RESOURCE, "tags are set (CreateKey carries them)"),
            # KMS's policy lockout safety check: the new key policy must let the caller put the key policy again.
            ("kms:PutKeyPolicy", "CreateKey", OWN_ARN, "a policy is set and bypass_policy_lockout_safety_check is "
                                                       "false (checked against the new key policy)"),
            ("kms:EnableKeyRotation", "EnableKeyRotation", OWN_ARN, "enable_key_rotation is true"),
            ("kms:GetKeyRotationStatus", "GetKeyRotationStatus", OWN_ARN, "enable_key_rotation is true"),
            ("kms:DisableKey", "DisableKey", OWN_ARN, "is_enabled is false"),
            ("kms:DescribeKey", "DescribeKey", OWN_ARN, "is_enabled is false"),
            ("kms:GetKeyPolicy", "GetKeyPolicy", OWN_ARN, "a policy is set"),
            ("kms:ListResourceTags", "ListResourceTags", OWN_ARN, "tags are set"),
        ),
        "read": (("kms:DescribeKey", "DescribeKey", OWN_ARN, ""),
                 ("kms:GetKeyPolicy", "GetKeyPolicy", OWN_ARN, ""),
                 ("kms:GetKeyRotationStatus", "GetKeyRotationStatus", OWN_ARN, "the key's origin is AWS_KMS"),
                 ("kms:ListResourceTags", "ListResourceTags", OWN_ARN, "")),
        "update": (
            ("kms:EnableKey", "EnableKey", OWN_ARN, "is_enabled changes to true"),
            ("kms:DisableKey", "DisableKey", OWN_ARN, "is_enabled changes to false"),
            ("kms:DescribeKey", "DescribeKey", OWN_ARN, "is_enabled or description changes"),
            ("kms:EnableKeyRotation", "EnableKeyRotation", OWN_ARN, "rotation is turned on or its period changes"),
            ("kms:DisableKeyRotation", "DisableKeyRotation", OWN_ARN, "rotation is turned off"),
            ("kms:GetKeyRotationStatus", "GetKeyRotationStatus", OWN_ARN, "rotation changes"),
            ("kms:UpdateKeyDescription", "UpdateKeyDescription", OWN_ARN, "description changes"),
            ("kms:PutKeyPolicy", "PutKeyPolicy", OWN_ARN, "policy changes"),
            ("kms:GetKeyPolicy", "GetKeyPolicy", OWN_ARN, "policy changes"),
            ("kms:TagResource", "TagResource", OWN_ARN, "tags change"),
            ("kms:UntagResource", "UntagResource", OWN_ARN, "tags are removed"),
        ),
        "delete": (("kms:ScheduleKeyDeletion", "ScheduleKeyDeletion", OWN_ARN, ""),
                   ("kms:DescribeKey", "DescribeKey", OWN_ARN, "")),
        "note": "kms:CreateKey supports no resource-level permission; every other call is authorised by the key "
                "policy together with identity policies (a key policy that does not allow the account leaves "
                "identity policies powerless).",
    },
    "aws:kms/alias:Alias": {
        "terraform": "aws_kms_alias", "file": "internal/service/kms/alias.go",
        "functions": ("resourceAliasCreate", "resourceAliasRead", "resourceAliasUpdate", "resourceAliasDelete"),
        "arn_of": "the alias: arn:aws:kms:REGION:ACCOUNT:alias/NAME", "reads_after": ("create", "update"),
        "read_at": "SDK v2 KMSClient version (findAliasByName over the ListAliases paginator)",
        "create": (("kms:CreateAlias", "CreateAlias", OWN_ARN, ""),
                   ("kms:CreateAlias", "CreateAlias", TARGET_KEY_ARN, "")),
        "read": (("kms:ListAliases", "ListAliases", ANY_RESOURCE, ""),),
        "update": (("kms:UpdateAlias", "UpdateAlias", OWN_ARN, "target_key_id changes"),
                   ("kms:UpdateAlias", "UpdateAlias", TARGET_KEY_ARN,
                    "target_key_id changes (on the current and on the new key)")),
        "delete": (("kms:DeleteAlias", "DeleteAlias", OWN_ARN, ""),
                   ("kms:DeleteAlias", "DeleteAlias", TARGET_KEY_ARN, "")),
        "note": "the action on the key is the one the key policy governs; pass the key ARN as `target_key_arn`.",
    },
    "aws:sqs/queue:Queue": {
        "terraform": "aws_sqs_queue", "file": "internal/service/sqs/queue.go",
        "functions": ("resourceQueueCreate", "resourceQueueRead", "resourceQueueUpdate", "resourceQueueDelete"),
        "helpers": ("internal/service/sqs/queue.go: waitQueueAttributesPropagated, waitQueueDeleted",),
        "arn_of": "the queue: arn:aws:sqs:REGION:ACCOUNT:NAME", "reads_after": ("create", "update"),
        "read_at": _V6_IDENTITY + ': @Testing(identityVersion="1;v6.19.0")',
        "create": (("sqs:CreateQueue", "CreateQueue", OWN_ARN, ""),
                   ("sqs:TagQueue", "CreateQueue", OWN_ARN, "tags are set (CreateQueue carries them)"),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "read": (("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, ""),
                 ("sqs:ListQueueTags", "ListQueueTags", OWN_ARN, "")),
        "update": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, "an argument other than tags changes"),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "an argument other than tags changes"),
                   ("sqs:TagQueue", "TagQueue", OWN_ARN, "tags change"),
                   ("sqs:UntagQueue", "UntagQueue", OWN_ARN, "tags are removed")),
        "delete": (("sqs:DeleteQueue", "DeleteQueue", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
    },
    "aws:sqs/queuePolicy:QueuePolicy": {
        "terraform": "aws_sqs_queue_policy", "file": "internal/service/sqs/queue_policy.go",
        "functions": ("queueAttributeHandler.Upsert", "queueAttributeHandler.Read", "queueAttributeHandler.Upsert",
                      "queueAttributeHandler.Delete"),
        "helpers": ("internal/service/sqs/attribute_funcs.go: queueAttributeHandler (attribute Policy)",),
        "arn_of": "the queue the policy is set on: arn:aws:sqs:REGION:ACCOUNT:NAME",
        "reads_after": ("create", "update"), "read_at": "SDK v2 SQSClient version of attribute_funcs.go",
        "create": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "read": (("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, ""),),
        "update": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "delete": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "note": "delete sets the Policy attribute to \"\" and waits for it.",
    },
    "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy": {
        "terraform": "aws_sqs_queue_redrive_allow_policy", "file": "internal/service/sqs/queue_redrive_allow_policy.go",
        "functions": ("queueAttributeHandler.Upsert", "queueAttributeHandler.Read", "queueAttributeHandler.Upsert",
                      "queueAttributeHandler.Delete"),
        "helpers": ("internal/service/sqs/attribute_funcs.go: queueAttributeHandler (attribute RedriveAllowPolicy)",),
        "arn_of": "the queue (the dead-letter queue) the attribute is set on: arn:aws:sqs:REGION:ACCOUNT:NAME",
        "reads_after": ("create", "update"), "read_at": "SDK v2 SQSClient version of attribute_funcs.go",
        "create": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "read": (("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, ""),),
        "update": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
        "delete": (("sqs:SetQueueAttributes", "SetQueueAttributes", OWN_ARN, ""),
                   ("sqs:GetQueueAttributes", "GetQueueAttributes", OWN_ARN, "")),
    },
    "aws:sns/topic:Topic": {
        "terraform": "aws_sns_topic", "file": "internal/service/sns/topic.go",
        "functions": ("resourceTopicCreate", "resourceTopicRead", "resourceTopicUpdate", "resourceTopicDelete"),
        "arn_of": "the topic: arn:aws:sns:REGION:ACCOUNT:NAME", "reads_after": ("create", "update"),
        "read_at": _V6_SDKV2,
        "create": (("sns:CreateTopic", "CreateTopic", OWN_ARN, ""),
                   ("sns:TagResource", "CreateTopic", OWN_ARN, "tags are set (CreateTopic carries them)"),
                   ("sns:SetTopicAttributes", "SetTopicAttributes", OWN_ARN,
                    "an attribute other than FifoTopic is set (one call per attribute)")),
        "read": (("sns:GetTopicAttributes", "GetTopicAttributes", OWN_ARN, ""),
                 ("sns:ListTagsForResource", "ListTagsForResource", OWN_ARN, "")),
        "update": (("sns:SetTopicAttributes", "SetTopicAttributes", OWN_ARN, "an argument other than tags changes"),
                   ("sns:TagResource", "TagResource", OWN_ARN, "tags change"),
                   ("sns:UntagResource", "UntagResource", OWN_ARN, "tags are removed")),
        "delete": (("sns:DeleteTopic", "DeleteTopic", OWN_ARN, ""),),
    },
    "aws:sns/topicPolicy:TopicPolicy": {
        "terraform": "aws_sns_topic_policy", "file": "internal/service/sns/topic_policy.go",
        "functions": ("resourceTopicPolicyUpsert", "resourceTopicPolicyRead", "resourceTopicPolicyUpsert",
                      "resourceTopicPolicyDelete"),
        "arn_of": "the topic the policy is set on: arn:aws:sns:REGION:ACCOUNT:NAME",
        "reads_after": ("create", "update"), "read_at": _V6_IDENTITY + ': @Testing(preIdentityVersion="v6.8.0")',
        "create": (("sns:SetTopicAttributes", "SetTopicAttributes", OWN_ARN, ""),),
        "read": (("sns:GetTopicAttributes", "GetTopicAttributes", OWN_ARN, ""),),
        "update": (("sns:SetTopicAttributes", "SetTopicAttributes", OWN_ARN, ""),),
        "delete": (("sns:SetTopicAttributes", "SetTopicAttributes", OWN_ARN, ""),),
        "note": "delete cannot remove a topic policy: it puts the default policy back (defaultTopicPolicy).",
    },
    "aws:sns/topicSubscription:TopicSubscription": {
        "terraform": "aws_sns_topic_subscription", "file": "internal/service/sns/topic_subscription.go",
        "functions": ("resourceTopicSubscriptionCreate", "resourceTopicSubscriptionRead",
                      "resourceTopicSubscriptionUpdate", "resourceTopicSubscriptionDelete"),
        "helpers": ("internal/service/sns/topic_subscription.go: waitSubscriptionConfirmed, waitSubscriptionDeleted",),
        "arn_of": "the topic subscribed to: arn:aws:sns:REGION:ACCOUNT:NAME (the topic policy governs Subscribe)",
        "reads_after": ("create", "update"), "read_at": "SDK v2 SNSClient version",
        "create": (("sns:Subscribe", "Subscribe", OWN_ARN, ""),
                   ("sns:GetSubscriptionAttributes", "GetSubscriptionAttributes", ANY_RESOURCE,
                    "the protocol needs a confirmation")),
        "read": (("sns:GetSubscriptionAttributes", "GetSubscriptionAttributes", ANY_RESOURCE, ""),),
        "update": (("sns:SetSubscriptionAttributes", "SetSubscriptionAttributes", ANY_RESOURCE, ""),),
        "delete": (("sns:Unsubscribe", "Unsubscribe", ANY_RESOURCE, ""),
                   ("sns:GetSubscriptionAttributes", "GetSubscriptionAttributes", ANY_RESOURCE, "")),
    },
    "aws:ecr/repository:Repository": {
        "terraform": "aws_ecr_repository", "file": "internal/service/ecr/repository.go",
        "functions": ("resourceRepositoryCreate", "resourceRepositoryRead", "resourceRepositoryUpdate",
                      "resourceRepositoryDelete"),
        "arn_of": "the repository: arn:aws:ecr:REGION:ACCOUNT:repository/NAME", "reads_after": ("create", "update"),
        "read_at": _V6_IDENTITY + ': @Testing(preIdentityVersion="v6.10.0")',
        "create": (("ecr:CreateRepository", "CreateRepository", OWN_ARN, ""),
                   ("ecr:TagResource", "CreateRepository", OWN_ARN, "tags are set (CreateRepository carries them)")),
        "read": (("ecr:DescribeRepositories", "DescribeRepositories", OWN_ARN, ""),
                 ("ecr:ListTagsForResource", "ListTagsForResource", OWN_ARN, "")),
        "update": (
            ("ecr:PutImageTagMutability", "PutImageTagMutability", OWN_ARN, "image_tag_mutability changes"),
            ("ecr:PutImageScanningConfiguration", "PutImageScanningConfiguration", OWN_ARN,
             "image_scanning_configuration changes"),
            ("ecr:TagResource", "TagResource", OWN_ARN, "tags change"),
            ("ecr:UntagResource", "UntagResource", OWN_ARN, "tags are removed"),
        ),
        "delete": (("ecr:DeleteRepository", "DeleteRepository", OWN_ARN, ""),
                   ("ecr:DescribeRepositories", "DescribeRepositories", OWN_ARN, "")),
    },
    "aws:ecr/repositoryPolicy:RepositoryPolicy": {
        "terraform": "aws_ecr_repository_policy", "file": "internal/service/ecr/repository_policy.go",
        "functions": ("resourceRepositoryPolicyPut", "resourceRepositoryPolicyRead", "resourceRepositoryPolicyPut",
                      "resourceRepositoryPolicyDelete"),
        "arn_of": "the repository the policy is set on: arn:aws:ecr:REGION:ACCOUNT:repository/NAME",
        "reads_after": ("create", "update"), "read_at": "SDK v2 ECRClient version",
        "create": (("ecr:SetRepositoryPolicy", "SetRepositoryPolicy", OWN_ARN, ""),),
        "read": (("ecr:GetRepositoryPolicy", "GetRepositoryPolicy", OWN_ARN, ""),),
        "update": (("ecr:SetRepositoryPolicy", "SetRepositoryPolicy", OWN_ARN, ""),),
        "delete": (("ecr:DeleteRepositoryPolicy", "DeleteRepositoryPolicy", OWN_ARN, ""),),
    },
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": {
        "terraform": "aws_ecr_lifecycle_policy", "file": "internal/service/ecr/lifecycle_policy.go",
        "functions": ("resourceLifecyclePolicyCreate", "resourceLifecyclePolicyRead", "",
                      "resourceLifecyclePolicyDelete"),
        "arn_of": "the repository the lifecycle policy is set on: arn:aws:ecr:REGION:ACCOUNT:repository/NAME",
        "reads_after": ("create",), "read_at": "SDK v2 ECRClient version",
        "create": (("ecr:PutLifecyclePolicy", "PutLifecyclePolicy", OWN_ARN, ""),),
        "read": (("ecr:GetLifecyclePolicy", "GetLifecyclePolicy", OWN_ARN, ""),),
        "update": (),
        "delete": (("ecr:DeleteLifecyclePolicy", "DeleteLifecyclePolicy", OWN_ARN, ""),),
        "note": "no update function: policy and repository force a replacement.",
    },
    "aws:ec2/vpcEndpoint:VpcEndpoint": {
        "terraform": "aws_vpc_endpoint", "file": "internal/service/ec2/vpc_endpoint.go",
        "functions": ("resourceVPCEndpointCreate", "resourceVPCEndpointRead", "resourceVPCEndpointUpdate",
                      "resourceVPCEndpointDelete"),
        "helpers": ("internal/service/ec2/wait.go: waitVPCEndpointAvailable, waitVPCEndpointDeleted",),
        "arn_of": "the endpoint: arn:aws:ec2:REGION:ACCOUNT:vpc-endpoint/VPCE_ID", "reads_after": ("create", "update"),
        "read_at": _V6_SDKV2,
        "create": (
            ("ec2:CreateVpcEndpoint", "CreateVpcEndpoint", OWN_ARN, ""),
            ("ec2:CreateTags", "CreateVpcEndpoint", OWN_ARN, "tags are set (TagSpecifications)"),
            ("ec2:DescribeVpcEndpointServiceConfigurations", "DescribeVpcEndpointServiceConfigurations",
             ANY_RESOURCE, "auto_accept is true and the endpoint awaits acceptance"),
            ("ec2:AcceptVpcEndpointConnections", "AcceptVpcEndpointConnections", ANY_RESOURCE,
             "auto_accept is true and the endpoint awaits acceptance"),
            ("ec2:DescribeVpcEndpoints", "DescribeVpcEndpoints", ANY_RESOURCE, ""),
        ),
        "read": (("ec2:DescribeVpcEndpoints", "DescribeVpcEndpoints", ANY_RESOURCE, ""),
                 ("ec2:DescribePrefixLists", "DescribePrefixLists", ANY_RESOURCE, ""),
                 ("ec2:DescribeNetworkInterfaces", "DescribeNetworkInterfaces", ANY_RESOURCE, "")),
        "update": (("ec2:ModifyVpcEndpoint", "ModifyVpcEndpoint", OWN_ARN, "an argument other than tags changes"),
                   ("ec2:DescribeVpcEndpoints", "DescribeVpcEndpoints", ANY_RESOURCE,
                    "an argument other than tags changes"),
                   ("ec2:CreateTags", "CreateTags", OWN_ARN, "tags change"),
                   ("ec2:DeleteTags", "DeleteTags", OWN_ARN, "tags are removed")),
        "delete": (("ec2:DeleteVpcEndpoints", "DeleteVpcEndpoints", OWN_ARN, ""),
                   ("ec2:DescribeVpcEndpoints", "DescribeVpcEndpoints", ANY_RESOURCE, "")),
        "note": "CreateVpcEndpoint is also authorised on the VPC, subnets, security groups and route tables it "
                "names; the endpoint policy governs calls made through the endpoint, not these EC2 calls, unless "
                "the deployer's own EC2 calls travel through an ec2 interface endpoint.",
    },
    "aws:cloudtrail/trail:Trail": {
        "terraform": "aws_cloudtrail", "file": "internal/service/cloudtrail/trail.go",
        "functions": ("resourceTrailCreate", "resourceTrailRead", "resourceTrailUpdate", "resourceTrailDelete"),
        "arn_of": "the trail: arn:aws:cloudtrail:REGION:ACCOUNT:trail/NAME", "reads_after": ("create", "update"),
        "read_at": "SDK v2 CloudTrailClient version",
        "create": (
            ("cloudtrail:CreateTrail", "CreateTrail", OWN_ARN, ""),
            ("cloudtrail:AddTags", "CreateTrail", OWN_ARN, "tags are set (CreateTrail carries TagsList)"),
            ("cloudtrail:StartLogging", "StartLogging", OWN_ARN, "enable_logging is true (the default)"),
            ("cloudtrail:PutEventSelectors", "PutEventSelectors", OWN_ARN, "event selectors are set"),
            ("cloudtrail:PutInsightSelectors", "PutInsightSelectors", OWN_ARN, "insight selectors are set"),
        ),
        "read": (("cloudtrail:DescribeTrails", "DescribeTrails", ANY_RESOURCE, ""),
                 ("cloudtrail:GetTrailStatus", "GetTrailStatus", OWN_ARN, ""),
                 ("cloudtrail:GetEventSelectors", "GetEventSelectors", OWN_ARN, "the trail has custom selectors"),
                 ("cloudtrail:GetInsightSelectors", "GetInsightSelectors", OWN_ARN, "the trail has insight selectors"),
                 ("cloudtrail:ListTags", "ListTags", OWN_ARN, "")),
        "update": (
            ("cloudtrail:UpdateTrail", "UpdateTrail", OWN_ARN, "a trail argument changes"),
            ("cloudtrail:StartLogging", "StartLogging", OWN_ARN, "enable_logging changes to true"),
            ("cloudtrail:StopLogging", "StopLogging", OWN_ARN, "enable_logging changes to false"),
            ("cloudtrail:PutEventSelectors", "PutEventSelectors", OWN_ARN, "event selectors change"),
            ("cloudtrail:PutInsightSelectors", "PutInsightSelectors", OWN_ARN, "insight selectors change"),
            ("cloudtrail:AddTags", "AddTags", OWN_ARN, "tags change"),
            ("cloudtrail:RemoveTags", "RemoveTags", OWN_ARN, "tags are removed"),
        ),
        "delete": (("cloudtrail:DeleteTrail", "DeleteTrail", OWN_ARN, ""),),
        "note": "the trail's bucket and key are written by the CloudTrail service principal, so their policies "
                "must allow cloudtrail.amazonaws.com; a CloudWatch Logs role is passed to the service.",
    },
}


def _entry(token: str, raw: dict) -> ProviderEntry:
    """One table entry from its plain-data form (the rows are `(action, api, resource, when)` tuples)."""
    phases = {p: tuple(ProviderAction(*row) for row in raw[p]) for p in PROVIDER_PHASES}
    return ProviderEntry(
        type_token=token, terraform_type=raw["terraform"], source_file=raw["file"], functions=raw["functions"],
        arn_of=raw["arn_of"], reads_after=raw.get("reads_after", ()), helpers=raw.get("helpers", ()),
        read_at=raw.get("read_at", "v6-line version (see provider_actions_s3)"), note=raw.get("note", ""), **phases)


PROVIDER_ACTIONS: dict[str, ProviderEntry] = {
    token: _entry(token, raw) for token, raw in {**S3_ENTRIES, **_OTHER_ENTRIES}.items()
}
"""Every resource type that has or is governed by a resource policy in the gpuburst plans, by Pulumi type token."""

UNGOVERNED_TYPES: dict[str, str] = {
    "aws:iam/role:Role": "its assumeRolePolicy is the trust policy: it governs sts:AssumeRole* into the role, "
                         "never the iam:* calls that create, read, update or delete it",
    "aws:iam/rolePolicy:RolePolicy": "its policy is an identity policy; IAM's own API has no resource-based policy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "policyArn names a managed identity policy; IAM's own API "
                                                          "has no resource-based policy",
}
"""Plan types that carry a policy property but whose provider calls no resource-based policy governs, with why."""

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def provider_entry(type_token: str) -> ProviderEntry:
    """The catalogue entry of one Pulumi type token."""
    try:
        return PROVIDER_ACTIONS[type_token]
    except KeyError:
        raise ValueError(f"type_token: {type_token!r} has no provider-actions entry") from None


def actions_for(type_token: str, phase: str) -> tuple[ProviderAction, ...]:
    """Every action one phase needs: its function's own calls, then the read's where the function ends by reading;
    each (action, resource, when) once, in call order."""
    entry = provider_entry(type_token)
    rows = entry.phase(phase) + (entry.read if phase in entry.reads_after else ())
    seen: set[tuple[str, str, str]] = set()
    out: list[ProviderAction] = []
    for row in rows:
        key = (row.action, row.resource, row.when)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return tuple(out)


def resource_arn(action: ProviderAction, own_arn: str, **related: str) -> str:
    """The ARN `action` is authorised on for a resource whose ARN is `own_arn` (`related` fills other placeholders,
    e.g. `target_key_arn=` for a KMS alias)."""
    values = {"arn": own_arn, **related}
    missing = [name for name in _PLACEHOLDER.findall(action.resource) if not values.get(name)]
    if missing:
        raise ValueError(f"{missing[0]}: no value given for {action.action}'s resource {action.resource!r}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], action.resource)
