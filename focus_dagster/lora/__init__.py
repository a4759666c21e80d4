"""LoRA fine-tuning of multimodal LLMs on yes/no answers: trained how, stored where.

`settings.LoraSettings` says how an adapter is trained (focus_dagster.adapter_plan, which adapters);
`train.train_adapter` trains one on (image, question, answer) examples with the scorer's own prompt
(`batches`), resumably (`checkpoint`); `train.write_adapter` publishes it with its manifest and
`train.load_adapted` applies it to a loaded model once it has checked that the adapter was trained on that
model's weights (`adapters`). Heavy libraries (torch, transformers, peft) are imported inside the functions.
"""
