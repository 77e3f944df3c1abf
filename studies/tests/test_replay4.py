"""studies/evidence/replay4.py's comparison of a replay with a recorded round-4 run's first
epochs (the replays themselves need the frozen worktree and minutes: run by hand)."""

import replay4
import tensorflow as tf


def _curve(*losses):
    return [
        {"epoch": i + 1, "train_loss": x, "val_acc": 10.0 * (i + 1)} for i, x in enumerate(losses)
    ]


class CompareTest(tf.test.TestCase):
    def test_identical_first_epochs_of_a_longer_run(self):
        recorded = {"curve": _curve(2.2, 1.8, 1.5, 1.2), "started": "2026-12-04T18:38:49Z"}
        rec = replay4.compare(recorded, _curve(2.2, 1.8))
        self.assertTrue(rec["identical"])
        self.assertIsNone(rec["first_epoch_differing"])
        self.assertEqual(rec["recorded"], _curve(2.2, 1.8))
        self.assertEqual(rec["recorded_started"], "2026-12-04T18:38:49Z")

    def test_the_first_epoch_that_differs_in_any_digit(self):
        # Run 84's case: the training loss differs in the fifth decimal at epoch 1.
        recorded = {"curve": _curve(2.26116, 1.79986, 2.70371)}
        rec = replay4.compare(recorded, _curve(2.26117, 1.79986, 2.70371))
        self.assertFalse(rec["identical"])
        self.assertEqual(rec["first_epoch_differing"], 1)
        rec = replay4.compare(recorded, _curve(2.26116, 1.79986, 2.47918))
        self.assertEqual(rec["first_epoch_differing"], 3)

    def test_a_replay_longer_than_the_record_is_not_identical(self):
        rec = replay4.compare({"curve": _curve(2.2)}, _curve(2.2, 1.8))
        self.assertFalse(rec["identical"])
        self.assertIsNone(rec["first_epoch_differing"])


if __name__ == "__main__":
    tf.test.main()
