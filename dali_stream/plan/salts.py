"""The words that tell each random draw of a run apart: every draw is seeded by (seed, epoch, ..., WORD), so a
plan, an augmentation or a transform is a pure function of the run's seed and its position. Resume depends on
them: a word changed here changes every plan drawn after it, so `plan.state.STATE_VERSION` changes with it."""

PARTITION = 0x9A27  # episodes split over ranks (`plan.partition`)
NODE = 0x40DE  # episodes split over nodes, and a node's over its ranks (`plan.partition.partition_by_node`)
ADMISSION = 0xAD  # the order a rank's episodes enter its pool (`EpochPlan.admission_order`)
PASS = 0x5A  # a pass's lanes or global permutation (`plan.passes`)
BATCH_ORDER = 0xB7  # a batch's samples in turn within each pass (`EpochPlan.batch`)
MEMBER_EPISODES = 0x51A7  # a mixture member's episodes drawn for its quota (`plan.mixture_epoch`)
MEMBER_FRAMES = 0xD7A5  # the frames a member repeats beyond whole copies (`plan.mixture_epoch.draws`)
AUGMENT = 0xA6  # the uniform numbers an `augment=` hook draws from (`graph.batches`)
TRANSFORMS = 0x7F  # torch's seed around each `image_transforms` call (`graph.transforms`)
